"""Behaviour cloning alone on a Fetch task: record scripted demonstrations, pretrain a fresh SAC on them, evaluate.

Usage::

    python benchmarks/pretrain_fetch.py FetchPush-v4 [--demos 100] [--epochs 200]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch

from herl import SAC, evaluate_policy
from herl.demos import generate_expert_traj
from herl.demos.experts import scripted_expert


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", help="FetchReach-v4, FetchPush-v4 or FetchPickAndPlace-v4")
    parser.add_argument("--demos", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    torch.set_num_threads(1)
    start = time.time()
    demos = generate_expert_traj(scripted_expert(args.env), None, gym.make(args.env), n_episodes=args.demos,
                                 seed=args.seed)
    model = SAC("MultiInputPolicy", gym.make(args.env), seed=args.seed, policy_kwargs=dict(net_arch=[256, 256, 256]))
    model.pretrain(demos, n_epochs=args.epochs, learning_rate=1e-3, batch_size=256)
    env = gym.make(args.env)
    env.reset(seed=10_000 + args.seed)
    _, _, success = evaluate_policy(model, env, n_eval_episodes=args.episodes, deterministic=True,
                                    return_success_rate=True)
    print(f"{args.env}: pretraining alone on {args.demos} scripted demos, success {success:.2f} over "
          f"{args.episodes} episodes ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
