"""DQN + HER on bit flipping, then DQN alone on the same budget: the HER paper's first experiment (section 3.1).

    python examples/bit_flipping_dqn_her.py               # 15 bits, 10k steps each (a few minutes on 2 cores)
    python examples/bit_flipping_dqn_her.py --n-bits 8 --steps 2000

With 15 bits a random policy reaches the goal once in 2^15 episodes, so DQN alone never sees a reward of 0;
with HER each episode teaches the goals it did reach. The command line runs the same comparison:

    herl train --env herl/BitFlipping-v0 --set env.n_bits=15 --run-dir runs/her
    herl train --env herl/BitFlipping-v0 --set env.n_bits=15 --no-her --run-dir runs/plain
    herl plot runs/her runs/plain -o bit_flipping.png
"""

from __future__ import annotations

import argparse

from herl import DQN, HerReplayBuffer, ReplayBuffer, evaluate_policy
from herl.envs import BitFlippingEnv

# the settings of herl's bit_flipping preset (src/herl/presets/bit_flipping.toml)
SETTINGS = dict(learning_rate=1e-3, batch_size=256, learning_starts=1000, gamma=0.95, train_freq=1,
                target_update_interval=500, exploration_fraction=0.2, exploration_final_eps=0.02, double_q=True,
                policy_kwargs=dict(net_arch=[256, 256]))


def train(n_bits: int, steps: int, seed: int, her: bool) -> float:
    """Success rate over 50 episodes of DQN trained for ``steps`` env steps, with or without HER."""
    buffer = dict(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(n_sampled_goal=4)) if her else \
        dict(replay_buffer_class=ReplayBuffer)
    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=n_bits), seed=seed, **buffer, **SETTINGS)
    model.learn(steps)
    _, _, success = evaluate_policy(model, BitFlippingEnv(n_bits=n_bits), n_eval_episodes=50,
                                    return_success_rate=True, seed=seed)
    return success


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-bits", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    success = {her: train(args.n_bits, args.steps, args.seed, her) for her in (True, False)}
    print(f"{args.n_bits}-bit flipping after {args.steps} steps: success rate {success[True]:.2f} with HER, "
          f"{success[False]:.2f} without")
    return success[True]


if __name__ == "__main__":
    main()
