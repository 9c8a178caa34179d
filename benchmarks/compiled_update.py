"""The compiled update (``compile=True``) against the eager one: time per gradient step and compile time.

Two models of one algorithm, seeded alike, one eager and one compiled, take turns on the same batches (FetchPush's
shapes: 25 observation + 3 goal inputs, 4 actions; HER batches are just batches to the update) in one process, so both
see the same machine. Times are process time per update (CPU) or wall time with synchronization (CUDA), medians of
``--rounds`` rounds of ``--updates`` updates, after ``--warmup`` updates that include compiling.

    python benchmarks/compiled_update.py [--algo tqc] [--net 256 256] [--batch 256] [--precision float32 bfloat16]
        [--device cpu|cuda] [--updates 200] [--rounds 5] [--tf32]

``--tf32`` lets CUDA multiply float32 matrices in TF32 on the tensor cores (``torch.backends.cuda.matmul.allow_tf32``,
what JAX does by default on those GPUs; herl leaves it off): whether the update's float32 products bound its time there.

``compile=True`` compiles the whole step as one function (``herl.training.fused_step``; on CUDA in CUDA graphs). The
table ends with the compiled model's largest weight difference to the eager one after all its updates (the same batches
in the same order).
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

from herl import DDPG, DQN, SAC, TD3, TQC

ALGOS = {"sac": SAC, "tqc": TQC, "td3": TD3, "ddpg": DDPG, "dqn": DQN}


def batch(n: int, obs_space: gym.spaces.Dict, action_dim: int, device: torch.device, rng: torch.Generator):
    def obs():
        return {k: torch.randn(n, *obs_space[k].shape, generator=rng).to(device) for k in obs_space}

    return SimpleNamespace(observations=obs(), next_observations=obs(),
                           actions=(torch.rand(n, action_dim, generator=rng) * 2 - 1).to(device),
                           rewards=-torch.rand(n, 1, generator=rng).round().to(device), dones=torch.zeros(n, 1, device=device),
                           discounts=torch.full((n, 1), 0.95, device=device), weights=None, demo_mask=None, indexes=None)


def timed(model, batches, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
        start = time.perf_counter()
    else:
        start = time.process_time()
    for b in batches:
        model._update(b)
        model._n_updates += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter() - start
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ALGOS), default="tqc")
    parser.add_argument("--net", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precision", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tf32", action="store_true", help="CUDA's float32 products in TF32 (tensor cores)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    obs_space = gym.spaces.Dict({"observation": gym.spaces.Box(-np.inf, np.inf, (25,), np.float32),
                                 "achieved_goal": box, "desired_goal": box})
    cls = ALGOS[args.algo]
    action_space = gym.spaces.Discrete(4) if cls is DQN else gym.spaces.Box(-1, 1, (4,), np.float32)
    print(f"{cls.__name__}, net {args.net}, batch {args.batch}, {args.threads} thread(s), {device}, torch {torch.__version__}"
          + (", float32 products in TF32" if args.tf32 and device.type == "cuda" else ""))
    print("| precision | eager ms/update | compiled ms/update | compiled/eager | compile s "
          "| largest weight difference |")
    print("|---|---|---|---|---|---|")
    for precision in args.precision:
        models = [cls("MultiInputPolicy", None, observation_space=obs_space, action_space=action_space, device=device,
                      seed=0, batch_size=args.batch, compile=compile,
                      policy_kwargs=dict(net_arch=args.net, precision=precision)) for compile in (False, True)]
        rng = torch.Generator().manual_seed(0)
        action_dim = 1 if cls is DQN else 4
        batches = [batch(args.batch, obs_space, action_dim, device, rng) for _ in range(8)]
        if cls is DQN:
            for b in batches:
                b.actions = b.actions.abs().mul(3).round().long().clamp(0, 3)
        for model in models:
            timed(model, (batches[i % 8] for i in range(args.warmup)), device)
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, model in enumerate(models):
                times[i].append(timed(model, (batches[j % 8] for j in range(args.updates)), device) / args.updates * 1e3)
        eager, compiled = (statistics.median(t) for t in times)
        eager_model, compiled_model = models
        difference = max((a - b).abs().max().item()
                         for a, b in zip(eager_model.nets.parameters(), compiled_model.nets.parameters()))
        print(f"| {precision} | {eager:.2f} | {compiled:.2f} | {compiled / eager:.2f} "
              f"| {compiled_model.compile_seconds:.1f} | {difference:.1e} |")


if __name__ == "__main__":
    main()
