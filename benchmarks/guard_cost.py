"""What the finiteness guard costs: buffer ``add`` and ``sample`` with the guard on and off, side by side,
and the loss check per update.

The workload is buffer_throughput.py's: observation 10 floats, goals 3, action 4, episodes of 50 steps, capacity 1e6,
100k transitions (20k with --quick), future strategy with k = 4. Times are CPU time (time.process_time: a process
waiting for a core on a shared machine is not charged), and rounds alternate guard on and off, so that a burst of
load hits both alike; each figure is the best round (noise only adds time).

    python benchmarks/guard_cost.py            # ~1 minute
    python benchmarks/guard_cost.py --quick
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

import herl.buffers.goal_functions as goal_functions
import herl.buffers.her as her_module
from herl import SAC, HerReplayBuffer
from herl.envs import PointReachEnv

OBS_DIM, GOAL_DIM, ACT_DIM, EPISODE = 10, 3, 4, 50


def sparse_reward(achieved_goal, desired_goal, info):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def spaces():
    from gymnasium import spaces as s

    box = lambda n: s.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
    return s.Dict(observation=box(OBS_DIM), achieved_goal=box(GOAL_DIM), desired_goal=box(GOAL_DIM)), \
        s.Box(-1, 1, (ACT_DIM,), np.float32)


def episodes(n_envs: int, n: int, rng: np.random.Generator):
    """Pre-made transitions (the env's cost is not the buffer's): (obs, next_obs, action, reward, terminated, truncated)."""
    steps = []
    for t in range(n // n_envs):
        obs = {"observation": rng.standard_normal((n_envs, OBS_DIM), np.float32),
               "achieved_goal": rng.standard_normal((n_envs, GOAL_DIM), np.float32),
               "desired_goal": rng.standard_normal((n_envs, GOAL_DIM), np.float32)}
        end = np.full(n_envs, (t + 1) % EPISODE == 0)
        steps.append((obs, obs, rng.uniform(-1, 1, (n_envs, ACT_DIM)).astype(np.float32), np.zeros(n_envs, np.float32),
                      np.zeros(n_envs, bool), end))
    return steps


def time_add(n_envs: int, check: bool, steps) -> float:
    obs_space, act_space = spaces()
    buffer = HerReplayBuffer(1_000_000, obs_space, act_space, n_envs=n_envs, compute_reward=sparse_reward,
                             device="cpu", seed=0, check_finite=check)
    add = buffer.add
    start = time.process_time()
    for obs, nxt, action, reward, terminated, truncated in steps:
        add(obs, nxt, action, reward, terminated=terminated, truncated=truncated)
    return (time.process_time() - start) / (len(steps) * n_envs) * 1e6, buffer


def time_sample(buffer, batch: int, checked: bool, n: int = 200) -> float:
    # the reward check is one function: swap it for a plain conversion to time its absence
    plain = lambda result, k, what: np.asarray(result, dtype=np.float32).reshape(-1)  # noqa: E731
    her_module.goal_function_values = goal_functions.goal_function_values if checked else plain
    start = time.process_time()
    for _ in range(n):
        buffer.sample(batch)
    her_module.goal_function_values = goal_functions.goal_function_values
    return (time.process_time() - start) / n * 1e6


def time_loss_check(rounds: int) -> tuple[float, float]:
    """(µs per SAC update, µs per loss check): the check runs once every LOSS_CHECK_EVERY updates."""
    import timeit

    env = PointReachEnv()
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, learning_starts=0, batch_size=256,
                policy_kwargs=dict(net_arch=[256, 256]), seed=0, device="cpu")
    model.learn(300)
    update = check = np.inf
    for _ in range(rounds):
        start = time.process_time()
        model.train(100)  # includes one check
        update = min(update, (time.process_time() - start) / 100 * 1e6)
        check = min(check, min(timeit.repeat(model.check_losses, timer=time.process_time, number=200, repeat=3))
                    / 200 * 1e6)
    return update, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = 20_000 if args.quick else 100_000
    rng = np.random.default_rng(0)
    print(f"{platform.machine()}, torch {torch.__version__}, numpy {np.__version__}; {n:,} transitions, "
          f"best of {args.rounds} alternating rounds")
    print("| n_envs | guard | add µs/transition | sample 256 µs | sample 1024 µs |")
    print("|---|---|---|---|---|")
    for n_envs in (1, 8):
        steps = episodes(n_envs, n, rng)
        best = {check: [np.inf, np.inf, np.inf] for check in (True, False)}
        for _ in range(args.rounds):
            for check in (True, False):
                add_us, buffer = time_add(n_envs, check, steps)
                row = best[check]
                row[0] = min(row[0], add_us)
                row[1] = min(row[1], time_sample(buffer, 256, check))
                row[2] = min(row[2], time_sample(buffer, 1024, check))
        for check in (True, False):
            a, s256, s1024 = best[check]
            print(f"| {n_envs} | {'on' if check else 'off'} | {a:.2f} | {s256:.1f} | {s1024:.1f} |")
        on, off = best[True], best[False]
        print(f"| {n_envs} | cost | {on[0] - off[0]:+.2f} | {on[1] - off[1]:+.1f} | {on[2] - off[2]:+.1f} |")
    import timeit

    import herl.training.base as base

    rewards = sparse_reward(rng.standard_normal((205, 3)), rng.standard_normal((205, 3)), {})
    checked = min(timeit.repeat(lambda: goal_functions.goal_function_values(rewards, 205, "compute_reward"),
                                timer=time.process_time, number=20000, repeat=args.rounds)) / 20000 * 1e6
    plain = min(timeit.repeat(lambda: np.asarray(rewards, dtype=np.float32).reshape(-1), timer=time.process_time,
                              number=20000, repeat=args.rounds)) / 20000 * 1e6
    print(f"\ncompute_reward's output for the ~205 relabeled rows of sample(256): checked {checked:.2f} µs, converted "
          f"only {plain:.2f} µs ({checked - plain:+.2f} µs per sample)")

    update, check = time_loss_check(args.rounds)
    print(f"\nSAC update (batch 256, [256, 256], CPU): {update:.0f} µs; one loss check {check:.1f} µs, made every "
          f"{base.LOSS_CHECK_EVERY} updates: {check / base.LOSS_CHECK_EVERY:.2f} µs per update "
          f"({100 * check / base.LOSS_CHECK_EVERY / update:.3f} %)")

if __name__ == "__main__":
    main()
