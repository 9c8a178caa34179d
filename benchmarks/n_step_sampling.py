"""What n-step returns cost a sampled batch: herl's plain buffer against SB3's NStepReplayBuffer, and herl's HER buffer
with n_steps = 1 and 3 (SB3 has no n-step HER).

One process, the workloads taking turns, one torch thread: FetchPush-sized transitions (observation 25 floats, goals 3,
action 4), episodes of 50 steps, 100k transitions stored, batch 256, torch tensors out. Prints microseconds per
``sample(256)`` (median of the repeats) and the ratios.

    python benchmarks/n_step_sampling.py [--repeats 5] [--samples 300]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from gymnasium import spaces

from herl.buffers import HerReplayBuffer, NStepReplayBuffer

OBS_DIM, GOAL_DIM, ACT_DIM, EPISODE, STORED, BATCH, GAMMA = 25, 3, 4, 50, 100_000, 256, 0.98
ACT = spaces.Box(-1, 1, (ACT_DIM,), np.float32)
FLAT = spaces.Box(-10, 10, (OBS_DIM,), np.float32)
GOAL_OBS = spaces.Dict({"observation": spaces.Box(-10, 10, (OBS_DIM,), np.float32),
                        "achieved_goal": spaces.Box(-10, 10, (GOAL_DIM,), np.float32),
                        "desired_goal": spaces.Box(-10, 10, (GOAL_DIM,), np.float32)})


def sparse_reward(achieved_goal, desired_goal, info):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def fill_flat(buffer, rng: np.random.Generator) -> None:
    for _ in range(STORED // EPISODE):
        obs = rng.normal(size=(EPISODE + 1, 1, OBS_DIM)).astype(np.float32)
        for t in range(EPISODE):
            last = t == EPISODE - 1
            buffer.add(obs[t], obs[t + 1], rng.uniform(-1, 1, (1, ACT_DIM)), np.array([-1.0]), np.array([last]),
                       [{"TimeLimit.truncated": last}])


def fill_her(buffer: HerReplayBuffer, rng: np.random.Generator) -> None:
    for _ in range(STORED // EPISODE):
        goal = rng.normal(size=GOAL_DIM).astype(np.float32) * 0.1
        achieved = np.cumsum(rng.normal(size=(EPISODE + 1, GOAL_DIM)) * 0.02, axis=0).astype(np.float32)
        obs = rng.normal(size=(EPISODE + 1, OBS_DIM)).astype(np.float32)
        for t in range(EPISODE):
            a = {"observation": obs[t], "achieved_goal": achieved[t], "desired_goal": goal}
            b = {"observation": obs[t + 1], "achieved_goal": achieved[t + 1], "desired_goal": goal}
            buffer.add(a, b, rng.uniform(-1, 1, ACT_DIM), sparse_reward(achieved[t + 1], goal, None).reshape(1),
                       terminated=np.array([False]), truncated=np.array([t == EPISODE - 1]))


def time_sampling(sample, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        sample(BATCH)
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=300, help="sample() calls per timing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from stable_baselines3.common.buffers import NStepReplayBuffer as SB3NStep

    buffers = {
        "herl NStepReplayBuffer, n=3": NStepReplayBuffer(STORED, FLAT, ACT, n_steps=3, gamma=GAMMA, seed=0),
        "SB3 NStepReplayBuffer, n=3": SB3NStep(STORED, FLAT, ACT, device="cpu", n_steps=3, gamma=GAMMA),
        "herl HerReplayBuffer, n=1": HerReplayBuffer(STORED, GOAL_OBS, ACT, compute_reward=sparse_reward, seed=0,
                                                      max_episode_length=EPISODE),
        "herl HerReplayBuffer, n=3": HerReplayBuffer(STORED, GOAL_OBS, ACT, compute_reward=sparse_reward, seed=0,
                                                      max_episode_length=EPISODE, n_steps=3, gamma=GAMMA),
    }
    for name, buffer in buffers.items():
        (fill_her if "Her" in name else fill_flat)(buffer, np.random.default_rng(0))
    times: dict[str, list[float]] = {name: [] for name in buffers}
    for _ in range(args.repeats):
        for name, buffer in buffers.items():
            times[name].append(time_sampling(buffer.sample, args.samples))
    median = {name: float(np.median(t)) for name, t in times.items()}
    print(f"sample({BATCH}) from {STORED:,} stored transitions, median of {args.repeats} repeats of {args.samples} calls:")
    for name, value in median.items():
        print(f"  {name:30s} {value:8.1f} us")
    print(f"  SB3 / herl, plain n-step:      {median['SB3 NStepReplayBuffer, n=3'] / median['herl NStepReplayBuffer, n=3']:.2f}x")
    print(f"  herl HER n=3 / n=1:            {median['herl HerReplayBuffer, n=3'] / median['herl HerReplayBuffer, n=1']:.2f}x")


if __name__ == "__main__":
    main()
