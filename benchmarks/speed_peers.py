"""Env steps per second while learning: herl against SBX (SB3 in JAX), Stable-Baselines3 and sb3-contrib, the
libraries taking turns in one process, one core, the same recipe.

Tasks (``--task``):

* ``push``: TQC + HER (future, k=4) on FetchPush-v4, [256, 256] networks, batch 256, learning rate 1e-3,
  gamma 0.95, tau 0.05, 25 quantiles, 2 dropped per critic; peers SBX and sb3-contrib.
* ``push512x2``: the same at the fetch_push preset's network size, [512, 512].
* ``push512``: the same with [512, 512, 512] networks, the fetch_pick_and_place and fetch_slide presets' size (and
  fetch_push's before it moved to two hidden layers).
* ``reach``: SAC + HER (future, k=4) on FetchReach-v4, [64, 64], batch 256, the same rates; peers SBX and SB3.

herl runs with its default precision (``auto``: bfloat16 hidden layers where the CPU multiplies in them natively,
else float32; the line says which), in float32, and, where herl multiplies float32 through oneDNN (herl.nn.gemm),
in float32 with PyTorch's own matmuls too; and with its update compiled (``compile=True``), in ``auto`` and in
float32. Each variant learns ``learning_starts + --warmup`` steps first (SBX and herl's compiled variants compile
their updates then), then ``--steps`` more are timed; ``--rounds`` turns, medians reported,
with herl's ratio to each peer. The process is pinned to ``--core`` and JAX and PyTorch to one thread each
(XLA_FLAGS is set before JAX is imported).

``--chunk N`` interleaves instead: every variant is built and warmed up once, then each round every variant learns
``N`` more steps in turn, so the libraries share the machine's state minute by minute (a fresh model per turn
sees the machine drift between turns: single turns varied by ±20-35 % on shared 2-core machines). It reports each
variant's rate over all its timed steps, and herl's ratio to each peer per round (median and range).

Usage::

    python benchmarks/speed_peers.py --task push --steps 600 --rounds 3
    python benchmarks/speed_peers.py --task reach --steps 1000 --rounds 3
    python benchmarks/speed_peers.py --task push --only "herl float32 compiled" SBX   # some variants only
    python benchmarks/speed_peers.py --task reach --chunk 200 --rounds 15   # interleaved, 200 steps a turn
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from collections.abc import Callable

warnings.filterwarnings("ignore")

TASKS = {
    "push": dict(env="FetchPush-v4", algo="tqc", net_arch=[256, 256], learning_starts=1000),
    "push512x2": dict(env="FetchPush-v4", algo="tqc", net_arch=[512, 512], learning_starts=1000),
    "push512": dict(env="FetchPush-v4", algo="tqc", net_arch=[512, 512, 512], learning_starts=1000),
    "reach": dict(env="FetchReach-v4", algo="sac", net_arch=[64, 64], learning_starts=100),
}


def recipe(task: dict) -> dict:
    policy_kwargs = dict(net_arch=list(task["net_arch"]), n_critics=2)
    kwargs = dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=task["learning_starts"], batch_size=256,
                  tau=0.05, gamma=0.95, train_freq=1, gradient_steps=1, policy_kwargs=policy_kwargs,
                  replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"))
    if task["algo"] == "tqc":
        kwargs["top_quantiles_to_drop_per_net"] = 2
        policy_kwargs["n_quantiles"] = 25
    return kwargs


def make_env(env_id: str):
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    return gym.make(env_id)


ATEN_VARIANT = "herl float32 (PyTorch's matmuls)"
"""herl in float32 with PyTorch's own CPU matmuls (herl.nn.gemm's "aten"), where herl's rule chose oneDNN's."""


def builders(task: dict) -> dict[str, Callable[[], object]]:
    """name -> a function that builds a fresh model of that library for the task."""

    def herl(precision: str, compile: bool = False) -> Callable[[], object]:
        def build():
            import herl

            kwargs = recipe(task)
            kwargs["policy_kwargs"]["precision"] = precision
            cls = herl.TQC if task["algo"] == "tqc" else herl.SAC
            return cls("MultiInputPolicy", make_env(task["env"]), replay_buffer_class=herl.HerReplayBuffer, seed=0,
                       device="cpu", compile=compile, **kwargs)
        return build

    def sbx():
        import sbx
        from stable_baselines3 import HerReplayBuffer

        cls = sbx.TQC if task["algo"] == "tqc" else sbx.SAC
        return cls("MultiInputPolicy", make_env(task["env"]), replay_buffer_class=HerReplayBuffer, seed=0, **recipe(task))

    def torch_peer():
        from stable_baselines3 import SAC, HerReplayBuffer

        if task["algo"] == "tqc":
            from sb3_contrib import TQC as cls
        else:
            cls = SAC
        return cls("MultiInputPolicy", make_env(task["env"]), replay_buffer_class=HerReplayBuffer, seed=0,
                   device="cpu", **recipe(task))

    peer = "sb3-contrib" if task["algo"] == "tqc" else "SB3"
    return {"herl (auto precision)": herl("auto"), "herl float32": herl("float32"),
            ATEN_VARIANT: herl("float32"), "herl compiled (auto precision)": herl("auto", True),
            "herl float32 compiled": herl("float32", True), "SBX": sbx, peer: torch_peer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="push")
    parser.add_argument("--steps", type=int, default=600, help="env steps timed per turn")
    parser.add_argument("--warmup", type=int, default=100, help="env steps learned after learning starts, untimed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=0, help="the CPU core the process is pinned to")
    parser.add_argument("--only", nargs="+", help="variants to run (names as printed), default all")
    parser.add_argument("--chunk", type=int, default=0,
                        help="interleave: build each variant once, then N timed steps each per round (0: off)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from herl.nn import gemm
    from herl.nn.mlp import resolve_precision

    task = TASKS[args.task]
    variants = builders(task)
    if gemm.cpu_backend() == "aten":  # the rule keeps PyTorch's path here: the variant would repeat herl float32
        del variants[ATEN_VARIANT]
    if args.only:
        variants = {name: build for name, build in variants.items() if name in args.only}
    print(f"# {args.task}: {task}; {platform.processor() or platform.machine()}, torch {torch.__version__} "
          f"({torch.backends.cpu.get_cpu_capability()}), herl's auto precision here: "
          f"{resolve_precision('auto', torch.device('cpu'))}, herl's float32 matmuls: {gemm.cpu_backend()}; "
          f"one core ({args.core}), one thread", flush=True)
    if args.chunk:
        interleaved(task, variants, args.chunk, args.warmup, args.rounds)
        return
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for turn in range(args.rounds):
        for name, build in variants.items():
            gemm.set_cpu_backend("aten" if name == ATEN_VARIANT else "auto")
            model = build()
            model.learn(task["learning_starts"] + args.warmup)
            start = time.perf_counter()
            model.learn(args.steps, reset_num_timesteps=False)
            rates[name].append(args.steps / (time.perf_counter() - start))
            print(f"[{turn}] {name}: {rates[name][-1]:.1f} env steps/s", flush=True)
            del model
    medians = {name: float(np.median(r)) for name, r in rates.items()}
    print("median: " + ", ".join(f"{name} {rate:.1f}" for name, rate in medians.items()))
    for mine in (n for n in medians if n.startswith("herl")):
        print(f"{mine}: " + ", ".join(f"{medians[mine] / rate:.2f}x {peer}" for peer, rate in medians.items()
                                      if not peer.startswith("herl")))


def interleaved(task: dict, variants: dict[str, Callable[[], object]], chunk: int, warmup: int, rounds: int) -> None:
    """Every variant built and warmed up once, then ``rounds`` rounds of ``chunk`` timed steps each, in turn."""
    import numpy as np
    from herl.nn import gemm

    models = {}
    for name, build in variants.items():
        gemm.set_cpu_backend("aten" if name == ATEN_VARIANT else "auto")
        models[name] = build()
        models[name].learn(task["learning_starts"] + warmup)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for turn in range(rounds):
        for name, model in models.items():
            gemm.set_cpu_backend("aten" if name == ATEN_VARIANT else "auto")
            start = time.perf_counter()
            model.learn(chunk, reset_num_timesteps=False)
            seconds[name].append(time.perf_counter() - start)
        print(f"[{turn}] " + ", ".join(f"{name} {chunk / s[-1]:.1f}" for name, s in seconds.items()), flush=True)
    rates = {name: chunk * len(s) / sum(s) for name, s in seconds.items()}
    print(f"env steps/s over {rounds} x {chunk} steps: " + ", ".join(f"{name} {r:.1f}" for name, r in rates.items()))
    peers = [n for n in rates if not n.startswith("herl")]
    for mine in (n for n in rates if n.startswith("herl")):
        parts = []
        for peer in peers:
            per_round = np.array(seconds[peer]) / np.array(seconds[mine])
            parts.append(f"{rates[mine] / rates[peer]:.2f}x {peer} (per round: median {np.median(per_round):.2f}, "
                         f"{per_round.min():.2f}-{per_round.max():.2f})")
        print(f"{mine}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
