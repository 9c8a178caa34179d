"""SAC + HER on PointReach (FetchReach's shape without MuJoCo), saved, loaded without an env, and evaluated.

    OMP_NUM_THREADS=1 python examples/point_reach_sac_her.py    # 5k steps: success 1.00 in about 20 s
    OMP_NUM_THREADS=1 python examples/point_reach_sac_her.py --steps 2000   # a quicker look (learning starts at 500)

(One torch thread: torch's default of one per core can make these small networks many times slower on a machine
where other work keeps a core busy.)

A saved model holds its spaces, so it loads and predicts with no env at all (e.g. on a robot). From the command
line, with periodic evaluations and checkpoints in a run folder:

    herl train --env herl/PointReach-v0 --run-dir runs/point_reach
    herl eval runs/point_reach --episodes 50
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import gymnasium as gym

from herl import SAC, HerReplayBuffer, evaluate_policy


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    env = gym.make("herl/PointReach-v0")
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                learning_rate=1e-3, gamma=0.95, tau=0.05, learning_starts=500, policy_kwargs=dict(net_arch=[64, 64]),
                seed=args.seed)
    model.learn(args.steps)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "point_reach_sac.zip"
        model.save(path)  # JSON + safetensors: weights, normalizer statistics, spaces, hyperparameters
        policy = SAC.load(path)  # no env needed to act

    obs, _ = env.reset(seed=args.seed)
    action, _ = policy.predict(obs, deterministic=True)
    print(f"first action towards goal {obs['desired_goal'].round(2)} from {obs['achieved_goal'].round(2)}: "
          f"{action.round(2)}")
    _, _, success = evaluate_policy(policy, env, n_eval_episodes=50, return_success_rate=True, seed=args.seed)
    print(f"PointReach: success rate {success:.2f} after {args.steps} steps")
    return success


if __name__ == "__main__":
    main()
