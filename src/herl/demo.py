"""``make demo``: DQN with Hindsight Experience Replay learns 15-bit flipping, then reports its success rate.

A random policy essentially never reaches the goal of 15-bit flipping (one chance in 2^15 per
episode), so plain DQN sees no reward at all; with HER every episode teaches the agent the goals it
did reach (Andrychowicz et al. 2017, section 3.1). Takes about a minute on two CPU cores.
"""

from __future__ import annotations

import argparse
import time

import torch

from herl import DQN, HerReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-bits", type=int, default=15)
    parser.add_argument("--max-steps", type=int, default=10_000, help="env-step budget")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model = DQN(
        "MultiInputPolicy",
        BitFlippingEnv(n_bits=args.n_bits),
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
        learning_rate=1e-3,
        learning_starts=100,
        batch_size=256,
        train_freq=1,
        gamma=0.95,
        exploration_fraction=0.1,
        exploration_final_eps=0.05,
        target_update_interval=500,
        policy_kwargs=dict(net_arch=[256, 256]),
        seed=args.seed,
    )
    eval_env = BitFlippingEnv(n_bits=args.n_bits)
    print(f"DQN + HER on {args.n_bits}-bit flipping (goal: all ones, random start), up to {args.max_steps} env steps")
    start, success = time.perf_counter(), 0.0
    while model.num_timesteps < args.max_steps:
        model.learn(1000, reset_num_timesteps=False)
        _, _, success = evaluate_policy(model, eval_env, n_eval_episodes=100, return_success_rate=True, seed=args.seed)
        print(f"  {model.num_timesteps:6d} steps  success rate {success:.2f}  ({time.perf_counter() - start:.0f} s)",
              flush=True)
        if success >= 0.95:
            break
    print(f"Success rate reached: {success:.2f} over 100 evaluation episodes after {model.num_timesteps} env steps")
    return success


if __name__ == "__main__":
    # One intra-op thread: for these small networks a second one gains a few percent on an idle machine,
    # while OpenMP threads on a busy one (other processes on the cores) made updates 25x slower here.
    torch.set_num_threads(1)
    main()
