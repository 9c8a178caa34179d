"""Whether the MJX envs repeat themselves on a device: ``reset(seed)`` twice, and one seeded rollout twice, compared
entry by entry, with the time per env step, under three settings, each in its own process (XLA reads its flags when
JAX starts), the three at once (so the times are rough: they share the device):

- ``as is``: herl's XLA flags (CUDA command buffers off);
- ``deterministic ops``: also ``--xla_gpu_deterministic_ops=true`` (XLA's scatter-adds, which MJX's sums over a body
  tree use, then add in a fixed order instead of by atomics);
- ``host waits``: as is, but the host waits for each JAX step's arrays before PyTorch reads them (rules out PyTorch
  reading through DLPack before JAX has written).

    python benchmarks/mjx_determinism.py [--device cuda] [--n-envs 1024] [--steps 50] [--envs herl/MJXFetchPush-v0 ...]

Prints one row per env and setting: resets equal (or how they differ), rollouts equal, ms per env step (all envs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {"as is": "", "deterministic ops": "--xla_gpu_deterministic_ops=true", "host waits": ""}


def compare(a: dict, b: dict) -> str:
    import torch

    differ = {key: (a[key] != b[key]).sum().item() for key in a if not torch.equal(a[key], b[key])}
    if not differ:
        return "equal"
    gap = max((a[k].double() - b[k].double()).abs().max().item() for k in differ)
    return ", ".join(f"{k}: {n} differ" for k, n in differ.items()) + f" (at most {gap:.2g})"


def child(setting: str, args: argparse.Namespace) -> None:
    import torch

    from herl.batched.registry import make_batched_env
    from herl.batched.mjx import MJXGoalEnv

    if setting == "host waits":
        simulate = MJXGoalEnv._simulate

        def waited(self, *a, **k):
            out = simulate(self, *a, **k)
            self._jax.block_until_ready(out)
            return out

        MJXGoalEnv._simulate = waited
    for env_id in args.envs:
        env = make_batched_env(env_id, args.n_envs, args.device)
        first, again = env.reset(seed=1), env.reset(seed=1)

        def rollout() -> tuple[dict, float]:
            env.reset(seed=2)
            rng = torch.Generator(device=env.device).manual_seed(3)
            obs = None
            start = time.perf_counter()
            for _ in range(args.steps):
                actions = torch.rand((env.n_envs, *env.single_action_space.shape), generator=rng, device=env.device)
                obs = env.step(actions * 2 - 1).obs
            if env.device.type == "cuda":
                torch.cuda.synchronize()
            return {k: v.clone() for k, v in obs.items()}, time.perf_counter() - start

        rollout()  # compiles
        (one, _), (two, seconds) = rollout(), rollout()
        print(json.dumps({"env": env_id, "setting": setting, "reset": compare(first, again),
                          "rollout": compare(one, two), "ms_per_step": 1e3 * seconds / args.steps}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--n-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--envs", nargs="+", default=["herl/MJXFetchPush-v0", "herl/MJXPush-v0"])
    parser.add_argument("--child", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return
    print(f"{args.n_envs} envs on {args.device}, {args.steps} steps per rollout")
    print("| env | setting | reset(seed) twice | rollout twice | ms per step |\n|---|---|---|---|---|")
    runs = {}
    for setting, flag in SETTINGS.items():  # at once: compiling MJXFetchPush's step takes a minute or more
        env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()}
        runs[setting] = subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--child", setting], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for setting, run in runs.items():
        out, err = run.communicate()
        for row in (json.loads(line) for line in out.splitlines() if line.startswith("{")):
            print(f"| {row['env']} | {setting} | {row['reset']} | {row['rollout']} | {row['ms_per_step']:.2f} |")
        if run.returncode:
            print(f"| - | {setting} | failed: {err.strip().splitlines()[-1:]} | | |")


if __name__ == "__main__":
    main()
