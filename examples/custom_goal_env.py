"""A goal env of your own, checked and trained with DQN + HER; then the same env from the command line.

    python examples/custom_goal_env.py                    # 4k steps on an 8x8 grid
    python examples/custom_goal_env.py --steps 500 --size 5

What HER needs of an env (docs/envs.md): dict observations with ``observation``, ``achieved_goal`` and
``desired_goal``, and a ``compute_reward(achieved_goal, desired_goal, info)`` that gives the reward ``step`` gives and
works on a batch of goals (HER recomputes rewards for substituted goals, thousands at a time).
``herl.envs.check_goal_env`` checks all of that. Registered with gymnasium, the env also trains from the command
line, where ``module:EnvId`` imports the module that registers it:

    PYTHONPATH=examples herl check-env custom_goal_env:GridReach-v0
    PYTHONPATH=examples herl train --algo dqn --env custom_goal_env:GridReach-v0 --set env.size=8
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from herl import DQN, HerReplayBuffer, evaluate_policy
from herl.envs import check_goal_env

MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]])


class GridReachEnv(gym.Env):
    """Walk on a ``size`` x ``size`` grid to a goal cell: reward -1 per step until there, 0 on it.

    The episode ends (terminated) on the goal and is truncated after ``2 * size`` steps.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        cell = spaces.Box(0, size - 1, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict({"observation": cell, "achieved_goal": cell, "desired_goal": cell})
        self.action_space = spaces.Discrete(4)
        self.position = self.goal = np.zeros(2, dtype=np.float32)
        self.steps = 0

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: dict) -> np.ndarray:
        # Vectorized over a leading batch axis: compare along the last axis only.
        return -np.any(achieved_goal != desired_goal, axis=-1).astype(np.float32)

    def compute_terminated(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: dict) -> np.ndarray:
        # The episode ends on the goal: HER recomputes this for relabeled transitions, so that reaching
        # a hindsight goal is a terminal transition too (no bootstrapping past it).
        return np.all(achieved_goal == desired_goal, axis=-1)

    def _obs(self) -> dict[str, np.ndarray]:
        position = self.position.copy()
        return {"observation": position, "achieved_goal": position.copy(), "desired_goal": self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position, self.goal = self.np_random.integers(0, self.size, size=(2, 2)).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action: int):
        self.position = np.clip(self.position + MOVES[int(action)], 0, self.size - 1).astype(np.float32)
        self.steps += 1
        obs = self._obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        success = reward == 0.0
        return obs, reward, success, self.steps >= 2 * self.size and not success, {"is_success": success}


if "GridReach-v0" not in gym.envs.registry:
    gym.register("GridReach-v0", entry_point=GridReachEnv)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    check_goal_env(GridReachEnv(args.size))  # raises GoalEnvError, saying what to fix, if HER cannot use the env
    her = dict(n_sampled_goal=4, goal_selection_strategy="future")
    model = DQN("MultiInputPolicy", GridReachEnv(args.size), replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=her, learning_starts=200, learning_rate=1e-3, gamma=0.9, train_freq=1,
                target_update_interval=250, exploration_fraction=0.3, seed=args.seed)
    model.learn(args.steps)
    _, _, success = evaluate_policy(model, GridReachEnv(args.size), n_eval_episodes=50, return_success_rate=True,
                                    seed=args.seed)
    print(f"GridReach {args.size}x{args.size}: success rate {success:.2f} after {args.steps} steps")
    return success


if __name__ == "__main__":
    main()
