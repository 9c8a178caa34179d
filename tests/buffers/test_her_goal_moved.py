"""``goal_moved_share``: the share of the last 100 episodes stored whose achieved goal moved (FetchPush's block)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from herl import HerReplayBuffer

OBS = spaces.Dict({k: spaces.Box(-100, 100, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
ACT = spaces.Box(-1, 1, (1,), np.float32)


def reward(achieved_goal, desired_goal, info=None):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def make(**kwargs) -> HerReplayBuffer:
    kwargs = {"buffer_size": 1000, "compute_reward": reward, "seed": 0, "max_episode_length": 50, **kwargs}
    return HerReplayBuffer(kwargs.pop("buffer_size"), OBS, ACT, **kwargs)


def play(buffer: HerReplayBuffer, step: float, length: int = 10, episode: int = 0, end: bool = True) -> None:
    """One episode whose achieved goal moves ``step`` per transition along the first axis."""
    achieved = np.zeros(2, np.float32)
    move = np.array([step, 0], np.float32)
    for t in range(length):
        moved = achieved + move
        obs = {"observation": np.array([episode, t], np.float32), "achieved_goal": achieved,
               "desired_goal": np.full(2, 50, np.float32)}
        last = end and t == length - 1
        buffer.add(obs, {**obs, "achieved_goal": moved}, np.zeros(1), np.array([-1.0]), np.array([last]),
                   [{"TimeLimit.truncated": last}])
        achieved = moved


@pytest.mark.parametrize("kwargs", [{}, {"online_sampling": False}, {"optimize_memory_usage": True},
                                    {"storage_device": "cpu"}])
def test_goal_moved_share_counts_the_last_hundred_episodes_that_moved_their_goal(kwargs):
    buffer = make(buffer_size=20_000, **kwargs)
    assert buffer.goal_moved_share is None
    for episode in range(4):
        play(buffer, 0.01 if episode == 1 else 0.0, episode=episode)
    assert buffer.goal_moved_share == 0.25
    play(buffer, 0.0005, episode=4)  # 5 mm in all: moved
    play(buffer, 0.00005, episode=5)  # 0.5 mm: below the threshold
    assert buffer.goal_moved_share == pytest.approx(2 / 6)
    for episode in range(100):  # only the last 100 count
        play(buffer, 0.0, episode=6 + episode)
    assert buffer.goal_moved_share == 0.0
    play(buffer, 0.01, episode=200, end=False)
    buffer.truncate_last_trajectory()  # an episode closed by truncation counts too
    assert buffer.goal_moved_share == 0.01
