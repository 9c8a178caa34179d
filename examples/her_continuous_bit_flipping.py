"""Stable-Baselines 2's HER documentation example, on herl: DDPG/TD3/SAC + HER on continuous bit flipping.

    python examples/her_continuous_bit_flipping.py                  # SAC, 6 bits, 5k steps
    python examples/her_continuous_bit_flipping.py --algo TD3 --n-bits 4 --steps 3000

Trains, saves, loads the model without an env, and prints the success rate over 100 episodes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import herl
from herl import HerReplayBuffer, NormalActionNoise, evaluate_policy
from herl.envs import BitFlippingEnv


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["DDPG", "TD3", "SAC"], default="SAC")
    parser.add_argument("--n-bits", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    env = BitFlippingEnv(n_bits=args.n_bits, continuous=True)
    algo = getattr(herl, args.algo)
    noise = None if args.algo == "SAC" else NormalActionNoise(np.zeros(args.n_bits), 0.2 * np.ones(args.n_bits))
    model = algo("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer,
                 replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                 action_noise=noise, learning_rate=1e-3, gamma=0.95, batch_size=256, learning_starts=200,
                 policy_kwargs=dict(net_arch=[64, 64]), seed=args.seed)
    model.learn(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        model.save(Path(tmp) / "model.zip")
        model = algo.load(Path(tmp) / "model.zip")  # predicts without an env
    eval_env = BitFlippingEnv(n_bits=args.n_bits, continuous=True)
    _, _, success = evaluate_policy(model, eval_env, n_eval_episodes=100, return_success_rate=True, seed=args.seed)
    print(f"{args.algo}+HER on continuous {args.n_bits}-bit flipping after {args.steps} steps: success rate {success:.2f}")
    return success


if __name__ == "__main__":
    main()
