"""``motion_bonus``: an unsuccessful step that moves the achieved goal gets a bonus added to its sampled reward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import HerReplayBuffer

OBS = spaces.Dict({k: spaces.Box(-100, 100, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
ACT = spaces.Box(-1, 1, (1,), np.float32)
GOAL = np.full(2, 50, np.float32)

LAYOUTS = [{}, {"optimize_memory_usage": True}, {"storage_device": "cpu"}, {"online_sampling": False}]


def reward(achieved_goal, desired_goal, info=None):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def make(**kwargs) -> HerReplayBuffer:
    kwargs = {"buffer_size": 1000, "compute_reward": reward, "motion_bonus": 0.5, "seed": 0,
              "max_episode_length": 50, **kwargs}
    return HerReplayBuffer(kwargs.pop("buffer_size"), OBS, ACT, **kwargs)


def play(buffer: HerReplayBuffer, moves: list[float], start: float = 0.0, episode: int = 0) -> None:
    """One episode whose achieved goal moves ``moves[t]`` along the second axis in step t; the observation holds
    (episode, t), and the stored reward is the env's (-1 unless the achieved goal reached GOAL)."""
    achieved = np.array([start, 0], np.float32)
    for t, move in enumerate(moves):
        moved = achieved + np.array([0, move], np.float32)
        obs = {"observation": np.array([episode, t], np.float32), "achieved_goal": achieved, "desired_goal": GOAL}
        next_obs = {**obs, "observation": np.array([episode, t + 1], np.float32), "achieved_goal": moved}
        last = t == len(moves) - 1
        buffer.add(obs, next_obs, np.zeros(1), reward(moved, GOAL).reshape(1), np.array([last]),
                   [{"TimeLimit.truncated": last}])
        achieved = moved


def as_numpy(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_bonus_is_half_a_reward_per_centimetre_up_to_one_centimetre(layout):
    moves = [0.0, 0.002, 0.005, 0.01, 0.03]  # bonus 0, 0.1, 0.25, 0.5, 0.5 (capped at the scale)
    buffer = make(n_sampled_goal=0, **layout)
    play(buffer, moves)
    for _ in range(3):  # added to the batch's copies: drawing the rows again gives the same rewards, not more
        samples = buffer.sample(500)
        t = as_numpy(samples.observations["observation"])[:, 1].astype(int)
        expected = np.array([-1.0, -0.9, -0.75, -0.5, -0.5], np.float32)[t]
        np.testing.assert_allclose(as_numpy(samples.rewards).ravel(), expected, atol=1e-6)
        assert set(t) == set(range(5))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_step_that_reaches_the_goal_gets_no_bonus(layout):
    buffer = make(n_sampled_goal=0, **layout)
    play(buffer, [0.06, 0.02], start=50.0)  # (50, 0.06), (50, 0.08): far from (50, 50), both -1 + 0.5
    np.testing.assert_allclose(as_numpy(buffer.sample(64).rewards), -0.5, atol=1e-6)
    buffer = make(n_sampled_goal=0, **layout)
    achieved = np.array([50, 49.9], np.float32)
    for t, move in enumerate([0.06, 0.02]):  # step 0 reaches the goal (49.96), step 1 moves within it (49.98)
        moved = achieved + np.array([0, move], np.float32)
        obs = {"observation": np.array([0, t], np.float32), "achieved_goal": achieved, "desired_goal": GOAL}
        next_obs = {**obs, "observation": np.array([0, t + 1], np.float32), "achieved_goal": moved}
        buffer.add(obs, next_obs, np.zeros(1), reward(moved, GOAL).reshape(1),
                   np.array([t == 1]), [{"TimeLimit.truncated": t == 1}])
        achieved = moved
    np.testing.assert_array_equal(as_numpy(buffer.sample(64).rewards), 0.0)


def test_relabeled_rows_get_the_bonus_on_their_new_reward():
    buffer = make(n_sampled_goal=4)
    play(buffer, [0.01] * 10)  # every step moves 1 cm: relabeled goals that are reached give 0, others -0.5
    samples = buffer.sample(2000)
    achieved = samples.next_observations["achieved_goal"].numpy()
    goals = samples.observations["desired_goal"].numpy()
    expected = np.where(reward(achieved, goals) < 0, -0.5, 0.0)
    np.testing.assert_allclose(samples.rewards.numpy().ravel(), expected, atol=1e-6)
    assert 0.2 < (expected == 0).mean() < 0.9  # both kinds were drawn


def test_off_by_default_and_other_scales():
    plain = make(motion_bonus=0.0, n_sampled_goal=0)
    play(plain, [0.01] * 4)
    np.testing.assert_array_equal(plain.sample(64).rewards.numpy(), -1.0)
    wide = make(motion_bonus=0.2, motion_bonus_scale=0.04, n_sampled_goal=0)
    play(wide, [0.01] * 4)  # a quarter of the scale: a quarter of the bonus
    np.testing.assert_allclose(wide.sample(64).rewards.numpy(), -0.95, atol=1e-6)


def test_the_settings_are_saved_with_the_buffer(tmp_path):
    buffer = make(motion_bonus=0.3, motion_bonus_scale=0.02, n_sampled_goal=0)
    play(buffer, [0.01] * 4)
    buffer.save(tmp_path / "buffer")
    loaded = HerReplayBuffer.load(tmp_path / "buffer", compute_reward=reward)
    assert (loaded.motion_bonus, loaded.motion_bonus_scale) == (0.3, 0.02)
    np.testing.assert_allclose(loaded.sample(16).rewards.numpy(), -0.85, atol=1e-6)


@pytest.mark.parametrize("kwargs, words", [
    ({"motion_bonus": 1.0}, "motion_bonus"),
    ({"motion_bonus": -0.1}, "motion_bonus"),
    ({"motion_bonus_scale": 0.0}, "motion_bonus_scale"),
])
def test_bad_settings_are_refused_with_the_fix(kwargs, words):
    with pytest.raises(ValueError, match=words):
        make(**kwargs)
