"""Bit flipping with DQN+HER: env steps until success >= 0.95 over 100 evaluation episodes.

* ``fixed``: ``BitFlippingEnv(n_bits=25)`` (SB3's version: random start, goal all ones), herl and
  Stable-Baselines3 with the same hyperparameters, in the same process.
* ``random-goal``: the HER paper's version (a new random goal every episode) at increasing n, herl only.

Usage::

    python benchmarks/bit_flipping.py fixed [--n-bits 25] [--max-steps 30000] [--seeds 0]
    python benchmarks/bit_flipping.py random-goal [--bits 10 15 20 25 30] [--max-steps 50000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from herl.envs import BitFlippingEnv

SETTINGS = dict(learning_rate=1e-3, learning_starts=100, batch_size=256, train_freq=1, gradient_steps=1, gamma=0.95,
                exploration_fraction=0.1, exploration_final_eps=0.05, target_update_interval=500,
                policy_kwargs=dict(net_arch=[256, 256]))
HER_KWARGS = dict(n_sampled_goal=4, goal_selection_strategy="future")


def success_rate(model, env: BitFlippingEnv, episodes: int = 100) -> float:
    """Deterministic success rate, with a plain loop so that herl and SB3 models are judged alike."""
    successes = 0
    for _ in range(episodes):
        obs, _ = env.reset()
        done, info = False, {}
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += bool(info["is_success"])
    return successes / episodes


def steps_to_solve(lib: str, n_bits: int, random_goal: bool, seed: int, max_steps: int, eval_every: int) -> tuple[int | None, float, float]:
    """(env steps at the first evaluation with success >= 0.95 or None, last success rate, seconds)."""
    if lib == "herl":
        from herl import DQN, HerReplayBuffer
    else:
        from stable_baselines3 import DQN, HerReplayBuffer
    env = BitFlippingEnv(n_bits=n_bits, random_goal=random_goal)
    eval_env = BitFlippingEnv(n_bits=n_bits, random_goal=random_goal)
    eval_env.reset(seed=10_000 + seed)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(HER_KWARGS),
                seed=seed, verbose=0, device="cpu", **SETTINGS)
    start, success = time.perf_counter(), 0.0
    while model.num_timesteps < max_steps:
        model.learn(eval_every, reset_num_timesteps=False)
        success = success_rate(model, eval_env)
        print(f"  {lib} n={n_bits} random_goal={random_goal} seed={seed}: {model.num_timesteps} steps, "
              f"success {success:.2f} ({time.perf_counter() - start:.0f} s)", flush=True)
        if success >= 0.95:
            return model.num_timesteps, success, time.perf_counter() - start
    return None, success, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["fixed", "random-goal"])
    parser.add_argument("--n-bits", type=int, default=25)
    parser.add_argument("--bits", type=int, nargs="+", default=[10, 15, 20, 25, 30])
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--no-sb3", action="store_true")
    args = parser.parse_args()
    # One intra-op thread: for these small networks a second one gains a few percent on an idle machine,
    # while OpenMP threads on a busy one (other processes on the cores) made updates 25x slower here.
    torch.set_num_threads(1)
    if args.what == "fixed":
        max_steps = args.max_steps or 30_000
        for lib in ["herl"] if args.no_sb3 else ["herl", "sb3"]:
            results = [steps_to_solve(lib, args.n_bits, False, seed, max_steps, args.eval_every) for seed in args.seeds]
            steps = [r[0] for r in results]
            solved = [s for s in steps if s is not None]
            median = f"{int(np.median(solved))}" if len(solved) == len(steps) else f"not all solved by {max_steps}"
            print(f"{lib}: {args.n_bits} bits, steps to success >= 0.95 per seed {steps}; median {median}", flush=True)
    else:
        max_steps = args.max_steps or 50_000
        for n_bits in args.bits:
            for seed in args.seeds:
                steps, success, seconds = steps_to_solve("herl", n_bits, True, seed, max_steps, args.eval_every)
                reached = f"{steps} steps" if steps is not None else f"not solved by {max_steps} (success {success:.2f})"
                print(f"random_goal n={n_bits} seed={seed}: {reached}, {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
