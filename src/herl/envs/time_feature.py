"""Time feature: the share of the episode's time limit still left, appended to the observation.

With a fixed time limit the remaining time is part of the task's state: two identical positions 5 and 45 steps
before the limit are worth different amounts. Pardo et al. 2018 ("Time Limits in Reinforcement Learning") give the
agent that number; rl-baselines3-zoo trains every Fetch task with it (sb3-contrib's ``TimeFeatureWrapper``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class TimeFeature(gym.Wrapper):
    """Append ``1 - t / max_steps`` (1.0 at reset, 0.0 at the limit) to the observation after ``t`` steps.

    A flat ``Box`` observation gets one more entry; a goal env's ``Dict`` observation gets it at the end of its
    ``"observation"`` entry, so that goals and ``compute_reward`` are untouched. ``max_steps`` defaults to the env's
    registered ``max_episode_steps``. Put it inside :class:`~herl.envs.ActionRepeat`, so that it counts env steps.
    """

    def __init__(self, env: gym.Env, max_steps: int | None = None) -> None:
        super().__init__(env)
        if max_steps is None:
            max_steps = getattr(env.spec, "max_episode_steps", None)
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ValueError(
                f"TimeFeature needs the episode's time limit, got max_steps={max_steps!r}: pass max_steps=N, or make "
                "the env with a limit (gym.make(id, max_episode_steps=N))"
            )
        self.max_steps = int(max_steps)
        self.key = None
        space = env.observation_space
        if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:
            self.key = "observation"
            self.observation_space = gym.spaces.Dict({**space.spaces, "observation": self._extend(space["observation"])})
        else:
            self.observation_space = self._extend(space)
        self.t = 0

    @staticmethod
    def _extend(space: gym.Space) -> gym.spaces.Box:
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"TimeFeature appends to a 1-D Box observation (or a Dict's 'observation' entry), got {space}: "
                "flatten the observation first (gymnasium.wrappers.FlattenObservation)"
            )
        dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32
        low = np.append(space.low, 0.0).astype(dtype)
        high = np.append(space.high, 1.0).astype(dtype)
        return gym.spaces.Box(low, high, dtype=dtype)

    def _with_time(self, obs: Any) -> Any:
        feature = max(0.0, 1.0 - self.t / self.max_steps)
        if self.key is None:
            return np.append(obs, feature).astype(self.observation_space.dtype)
        inner = self.observation_space[self.key]
        return {**obs, self.key: np.append(obs[self.key], feature).astype(inner.dtype)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.t = 0
        return self._with_time(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        return self._with_time(obs), reward, terminated, truncated, info
