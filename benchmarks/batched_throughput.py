"""Env steps per minute end to end on batched device-resident goal envs: collection, HER storage and sampling, and
the updates, with herl.batched.BatchedTrainer (SAC + HER future k=4 on BatchedPointReach, or ``--env`` another batched
env id, e.g. herl/MJXPush-v0), and the time split between the three; then the time of one env step, one ``add`` and
one ``sample`` alone.

Each configuration trains ``--warmup`` env steps first (learning_starts inside it), then ``--steps`` more are timed.
The split comes from a second pass of the same length that times collection (env step + acting + add) and
updates (sample + update) separately, synchronizing the device around each.

Usage::

    python benchmarks/batched_throughput.py --n-envs 256 1024 4096 --steps 400000 --threads 1
    python benchmarks/batched_throughput.py --device cuda --n-envs 2048 8192 --steps 5000000 --batch-size 4096
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

import herl
from herl.batched import BatchedTrainer
from herl.batched.registry import make_batched_env


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(n_envs: int, args: argparse.Namespace) -> BatchedTrainer:
    env = make_batched_env(args.env, n_envs, args.device)
    model = herl.SAC("MultiInputPolicy", observation_space=env.single_observation_space,
                     action_space=env.single_action_space, batch_size=args.batch_size,
                     learning_starts=min(args.warmup // 2, 100_000), buffer_size=args.buffer_size, seed=0,
                     device=args.device, policy_kwargs=dict(net_arch=args.net_arch))
    return BatchedTrainer(model, env, updates_per_step=args.updates_per_step, collect_steps=args.collect_steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="herl/BatchedPointReach-v0", help="a batched env id")
    parser.add_argument("--n-envs", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=400_000, help="timed env steps (all envs together)")
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--updates-per-step", type=float, default=1 / 256)
    parser.add_argument("--collect-steps", type=int, default=1)
    parser.add_argument("--buffer-size", type=int, default=2_000_000)
    parser.add_argument("--net-arch", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"device {device}; {args.env}; SAC [{', '.join(map(str, args.net_arch))}], batch {args.batch_size}, "
          f"{args.updates_per_step:g} updates per env step, HER future k=4")
    print("| n_envs | env steps/min | updates/s | collect share | update share |")
    print("|---|---|---|---|---|")
    parts = []
    for n_envs in args.n_envs:
        trainer = build(n_envs, args)
        trainer.learn(args.warmup)
        sync(device)
        updates0, start = trainer.model._n_updates, time.perf_counter()
        trainer.learn(args.warmup + args.steps)
        sync(device)
        elapsed = time.perf_counter() - start
        updates = trainer.model._n_updates - updates0
        collect, update = split(trainer, args.steps, device)
        print(f"| {n_envs} | {60 * args.steps / elapsed:,.0f} | {updates / elapsed:,.0f} | "
              f"{collect / (collect + update):.0%} | {update / (collect + update):.0%} |", flush=True)
        parts.append((n_envs, operations(trainer, args.batch_size, device)))
    print(f"\nms per call (medians of 200): env step, buffer add, buffer sample({args.batch_size}) with relabeling")
    for n_envs, (step_ms, add_ms, sample_ms) in parts:
        print(f"{n_envs} envs: step {step_ms:.3f}, add {add_ms:.3f}, sample {sample_ms:.3f}")


def operations(trainer: BatchedTrainer, batch_size: int, device: torch.device) -> tuple[float, float, float]:
    """Median milliseconds of one env step, one ``add`` of it and one ``sample``, each timed alone."""
    env, buffer = trainer.env, trainer.buffer
    actions = trainer._explore(trainer.obs)
    env_actions = trainer._env_actions(actions)
    times: dict[str, list[float]] = {"step": [], "add": [], "sample": []}
    for _ in range(200):
        sync(device)
        t0 = time.perf_counter()
        step = env.step(env_actions)
        sync(device)
        t1 = time.perf_counter()
        buffer.add(trainer.obs, actions, step.reward, step.terminated, step.truncated, step.final_obs)
        sync(device)
        t2 = time.perf_counter()
        buffer.sample(batch_size)
        sync(device)
        t3 = time.perf_counter()
        trainer.obs = step.obs
        for name, seconds in (("step", t1 - t0), ("add", t2 - t1), ("sample", t3 - t2)):
            times[name].append(seconds * 1e3)
    return tuple(float(np.median(times[name])) for name in ("step", "add", "sample"))


def split(trainer: BatchedTrainer, steps: int, device: torch.device) -> tuple[float, float]:
    """Seconds spent collecting and updating over ``steps`` more env steps, timed apart."""
    model, env, buffer = trainer.model, trainer.env, trainer.buffer
    collect = update = 0.0
    credit = 0.0
    target = model.num_timesteps + steps
    while model.num_timesteps < target:
        sync(device)
        t0 = time.perf_counter()
        actions = trainer._explore(trainer.obs)
        step = env.step(trainer._env_actions(actions))
        buffer.add(trainer.obs, actions, step.reward, step.terminated, step.truncated, step.final_obs)
        trainer.obs = step.obs
        model.num_timesteps += env.n_envs
        sync(device)
        t1 = time.perf_counter()
        credit += env.n_envs * trainer.settings.updates_per_step
        for _ in range(int(credit)):
            model._update(buffer.sample(model.config.batch_size))
        credit -= int(credit)
        sync(device)
        collect, update = collect + t1 - t0, update + time.perf_counter() - t1
    return collect, update


if __name__ == "__main__":
    main()
