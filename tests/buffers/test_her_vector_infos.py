"""A gymnasium vector env in SAME_STEP autoreset mode gives an ended env's last info in ``infos["final_info"]`` and
its reset's info at the top level: the buffer stores the last step's entries (it stored the reset's, so relabeled
rewards that read them were wrong, and a step where every env ended was refused)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from herl import HerReplayBuffer
from herl.envs import PointReachEnv


class Scaled(PointReachEnv):
    """A dense reward scaled by info["scale"] = the episode's number + 1, which the observation's 'episode' entry
    shows; reset's info says 99 (what the top level holds for an ended env)."""

    def __init__(self) -> None:
        super().__init__()
        self.episode = -1
        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces,
                                                  "episode": gym.spaces.Box(0.0, 1e6, (1,), np.float32)})

    def _get_obs(self) -> dict[str, np.ndarray]:
        return {**super()._get_obs(), "episode": np.array([self.episode], np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.episode += 1
        observation, _ = super().reset(seed=seed, options=options)
        return observation, {"scale": 99.0}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return (-np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1) * info["scale"]).astype(np.float32)

    def step(self, action):
        observation, _, terminated, truncated, info = super().step(action)
        info = {**info, "scale": float(self.episode + 1)}
        reward = float(self.compute_reward(observation["achieved_goal"], observation["desired_goal"], info))
        return observation, reward, terminated, truncated, info


@pytest.mark.parametrize("lengths", [(3, 4), (3, 3)], ids=["apart", "together"])
def test_an_ended_envs_info_entries_come_from_final_info(lengths):
    venv = SyncVectorEnv([lambda n=n: gym.wrappers.TimeLimit(Scaled(), n) for n in lengths],
                         autoreset_mode=AutoresetMode.SAME_STEP)
    buffer = HerReplayBuffer(400, venv.single_observation_space, venv.single_action_space, n_envs=2,
                             compute_reward=Scaled().compute_reward, copy_info_dict=True, seed=0, device="cpu")
    obs, _ = venv.reset(seed=0)
    venv.action_space.seed(0)
    for _ in range(30):
        action = venv.action_space.sample()
        next_obs, reward, terminated, truncated, infos = venv.step(action)
        stored = {key: value.copy() for key, value in next_obs.items()}
        for i in np.flatnonzero(infos.get("_final_obs", [])):
            for key in stored:
                stored[key][i] = infos["final_obs"][i][key]
        buffer.add(obs, stored, action, reward, terminated=terminated, truncated=truncated, infos=infos)
        obs = next_obs
    batch = buffer.sample(2000)
    scale = batch.observations["episode"].numpy().reshape(-1) + 1
    distance = np.linalg.norm(batch.next_observations["achieved_goal"].numpy()
                              - batch.observations["desired_goal"].numpy(), axis=-1)
    np.testing.assert_allclose(batch.rewards.numpy().reshape(-1), -distance * scale, rtol=1e-5)


def test_a_next_step_vector_env_given_to_the_buffer_is_warned_of():
    from herl.envs import GoalEnvWarning

    venv = SyncVectorEnv([lambda: gym.wrappers.TimeLimit(PointReachEnv(), 5)] * 2)  # gymnasium's default mode
    with pytest.warns(GoalEnvWarning, match=r"this vector env autoresets in NEXT_STEP mode .*AutoresetMode\.SAME_STEP"):
        HerReplayBuffer(100, venv.single_observation_space, venv.single_action_space, env=venv, n_envs=2)
