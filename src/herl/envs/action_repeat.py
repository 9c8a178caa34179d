"""Action repeat: each action the agent chooses is applied for ``repeat`` env steps.

The agent then decides once per ``repeat`` env steps: an episode of Fetch's 50 steps becomes 17 decisions with
``repeat=3``, each transition spans more of the task (exploration moves the gripper further per decision, values
look fewer decisions ahead), and an update per decision costs a third of the compute per env step. Used with SAC
on the Fetch tasks by ALF (HorizonRobotics/alf, ``sac_actrepeat_fetch``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class ActionRepeat(gym.Wrapper):
    """Apply each action for ``repeat`` steps of ``env``, stopping early when an episode ends.

    ``step`` returns the last observation, ``terminated``, ``truncated`` and ``info`` of the steps it took, with
    ``info["env_steps"]`` = how many (``repeat``, or fewer when the episode ended). Put it inside gymnasium's
    ``TimeLimit``'s reach (around the env that ``gym.make`` returns), so that the limit counts env steps: a 50-step
    episode with ``repeat=3`` is 16 decisions of 3 steps and one of 2.

    The reward: in a goal env (dict observations with ``achieved_goal`` and ``desired_goal``) the last step's, the
    reward of the state the decision reached, which is what ``compute_reward(achieved_goal, desired_goal)`` gives
    and what HER relabels with; in any other env the sum of the steps' rewards (frame skipping's convention).
    """

    def __init__(self, env: gym.Env, repeat: int) -> None:
        if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
            raise ValueError(f"action_repeat must be an integer >= 1 (1: every env step is a decision), got {repeat!r}")
        super().__init__(env)
        self.repeat = int(repeat)
        space = env.observation_space
        self.sum_rewards = not (isinstance(space, gym.spaces.Dict) and {"achieved_goal", "desired_goal"} <= set(space.spaces))

    def step(self, action: Any):
        total = 0.0
        for n in range(1, self.repeat + 1):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        info = {**info, "env_steps": n}
        return obs, (total if self.sum_rewards else reward), terminated, truncated, info
