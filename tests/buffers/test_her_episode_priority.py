"""``episode_priority="goal_motion"``: episodes are drawn by how far their achieved goal moved."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herl import HerReplayBuffer

OBS = spaces.Dict({k: spaces.Box(-100, 100, (2,), np.float32) for k in ("observation", "achieved_goal", "desired_goal")})
ACT = spaces.Box(-1, 1, (1,), np.float32)


def reward(achieved_goal, desired_goal, info=None):
    return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > 0.05).astype(np.float32)


def make(**kwargs) -> HerReplayBuffer:
    kwargs = {"buffer_size": 1000, "compute_reward": reward, "episode_priority": "goal_motion", "seed": 0,
              "max_episode_length": 50, **kwargs}
    return HerReplayBuffer(kwargs.pop("buffer_size"), OBS, ACT, **kwargs)


def play(buffer: HerReplayBuffer, step: float | tuple[float, float], length: int = 10, episode: int = 0,
         end: bool = True) -> None:
    """One episode whose achieved goal moves ``step`` per transition (a number: along the first axis); the
    observation holds (episode, t) so that a sampled row tells where it comes from."""
    achieved = np.zeros(2, np.float32)
    step = np.array([step, 0] if np.isscalar(step) else step, np.float32)
    for t in range(length):
        moved = achieved + step
        obs = {"observation": np.array([episode, t], np.float32), "achieved_goal": achieved,
               "desired_goal": np.full(2, 50, np.float32)}
        next_obs = {**obs, "achieved_goal": moved}
        last = end and t == length - 1
        buffer.add(obs, next_obs, np.zeros(1), np.array([-1.0]), np.array([last]), [{"TimeLimit.truncated": last}])
        achieved = moved


def episode_weight(path_length: float, scale: float = 0.05, weight: float = 10.0) -> float:
    return 1.0 + weight * min(path_length / scale, 1.0)


def drawn_share(buffer: HerReplayBuffer, episodes: set[int], n: int = 20_000) -> float:
    samples = buffer.sample(n)
    return float(np.isin(samples.observations["observation"][:, 0].numpy(), list(episodes)).mean())


def test_episodes_are_drawn_in_proportion_to_their_weights():
    buffer = make()
    steps = {0: 0.0, 1: 0.001, 2: 0.01, 3: 0.0}  # path lengths 0, 0.01, 0.1 (past the scale), 0
    for episode, step in steps.items():
        play(buffer, step, episode=episode)
    weights = {e: episode_weight(10 * s) for e, s in steps.items()}
    assert weights[1] == pytest.approx(3.0) and weights[2] == 11.0
    total = sum(weights.values())
    for episode in steps:
        assert drawn_share(buffer, {episode}) == pytest.approx(weights[episode] / total, abs=0.015)


def test_a_running_episode_has_weight_one_until_it_ends():
    buffer = make()
    play(buffer, 0.0, episode=0)
    play(buffer, 0.01, episode=1, end=False)  # moved, but still running
    assert drawn_share(buffer, {1}) == pytest.approx(0.5, abs=0.015)
    buffer.truncate_last_trajectory()  # closes it: now it has its weight
    assert drawn_share(buffer, {1}) == pytest.approx(11 / 12, abs=0.01)


def test_weight_and_scale_are_settings():
    buffer = make(goal_motion_weight=1.0, goal_motion_scale=1.0)
    play(buffer, 0.0, episode=0)
    play(buffer, 0.05, episode=1)  # path 0.5: weight 1 + 1 * 0.5
    assert drawn_share(buffer, {1}) == pytest.approx(1.5 / 2.5, abs=0.015)
    flat = make(goal_motion_weight=0.0)  # no extra weight: uniform
    play(flat, 0.0, episode=0)
    play(flat, 0.01, episode=1)
    assert drawn_share(flat, {1}) == pytest.approx(0.5, abs=0.015)


def test_height_gained_adds_the_lift_weight():
    """goal_lift_weight: the most the achieved goal's last coordinate rose above its start (a block lifted) earns a
    weight of its own on top of the path's; a fall earns none, and a lift only counts fully past the scale."""
    buffer = make(goal_lift_weight=30.0)
    play(buffer, 0.0, episode=0)  # still: 1
    play(buffer, 0.01, episode=1)  # pushed 10 cm along the table: 1 + 10
    play(buffer, (0.0, 0.01), episode=2)  # lifted 10 cm: 1 + 10 + 30
    play(buffer, (0.0, -0.01), episode=3)  # fell 10 cm: moved, not lifted: 1 + 10
    play(buffer, (0.0, 0.001), episode=4)  # lifted 1 cm: 1 + 10 * 0.2 + 30 * 0.2
    weights = {0: 1.0, 1: 11.0, 2: 41.0, 3: 11.0, 4: 9.0}
    total = sum(weights.values())
    for episode, weight in weights.items():
        assert drawn_share(buffer, {episode}) == pytest.approx(weight / total, abs=0.015)
    leaves = buffer.storage.priorities.state()["leaves"]
    np.testing.assert_allclose(np.unique(leaves[leaves > 0]), sorted(set(weights.values())), rtol=1e-5)


def test_a_goal_that_bobs_up_and_down_counts_its_highest_point_once():
    """A pushed block jitters: its height's rises must not add up to a lift. Up 2 cm and down, twice, is a 2 cm
    lift (a fifth of the 10 cm scale), not 4."""
    buffer = make(goal_lift_weight=30.0, goal_motion_weight=0.0, goal_motion_scale=0.1)
    play(buffer, 0.0, episode=0)
    for t, rise in enumerate((0.02, -0.02, 0.02, -0.02)):  # four one-step calls: one episode of four transitions
        play(buffer, (0.0, rise), length=1, episode=1, end=t == 3)
    assert drawn_share(buffer, {1}) == pytest.approx(4 * 7 / (4 * 7 + 10 * 1), abs=0.015)  # 1 + 30 * 0.2 each


def test_relabeled_goals_still_come_from_the_same_episode():
    buffer = make()
    for episode in range(4):
        play(buffer, 0.01 * (episode % 2), episode=episode)
    samples = buffer.sample(2000)
    obs, goals = samples.observations["observation"].numpy(), samples.observations["desired_goal"].numpy()
    relabeled = goals[:, 0] != 50
    assert relabeled.mean() == pytest.approx(0.8, abs=0.05)
    # episode e's achieved goals are multiples of its step (0 or 0.01) along the first axis, never 50
    moving = obs[:, 0] % 2 == 1
    assert (goals[relabeled & ~moving] == 0).all()
    assert (goals[relabeled & moving, 0] > 0).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0.0, 0.001, 0.004, 0.02])), min_size=1, max_size=25),
       st.booleans())
def test_every_stored_transition_has_its_episodes_weight_and_nothing_else_is_drawn(episodes, memory):
    """The sum tree's leaves after episodes wrap around a small buffer: each transition stored holds the weight of
    its episode, every other row 0 (an overwritten episode is never drawn)."""
    buffer = make(buffer_size=40, max_episode_length=None, optimize_memory_usage=memory)
    expected = {}
    for episode, (length, step) in enumerate(episodes):
        play(buffer, step, length=length, episode=episode)
        expected[episode] = episode_weight(length * step)
    storage = buffer.storage
    leaves = storage.priorities.state()["leaves"]
    live = storage.arrays()["is_transition"].reshape(-1)
    assert (leaves[~live] == 0).all()
    rows = np.flatnonzero(live)
    stored_episode = storage.states["observation"].reshape(-1, 2)[rows, 0].astype(int)
    np.testing.assert_allclose(leaves[rows], [expected[e] for e in stored_episode], rtol=1e-6)  # float32 goals
    drawn = buffer.sample(256).observations["observation"][:, 0].numpy().astype(int)
    assert set(drawn) <= set(stored_episode)


def test_save_and_load_keep_the_weights_and_continue_identically(tmp_path):
    buffer = make(goal_lift_weight=4.0)
    for episode in range(5):
        play(buffer, 0.01 * (episode == 2), episode=episode)
    buffer.save(tmp_path / "buffer")
    loaded = HerReplayBuffer.load(tmp_path / "buffer", compute_reward=reward)
    assert (loaded.episode_priority, loaded.goal_lift_weight) == ("goal_motion", 4.0)
    a, b = buffer.sample(64), loaded.sample(64)
    torch.testing.assert_close(a.observations["observation"], b.observations["observation"])
    play(buffer, (0.0, 0.01), episode=5)  # a lift: the loaded buffer gives it the same weight
    play(loaded, (0.0, 0.01), episode=5)
    torch.testing.assert_close(buffer.sample(64).observations["observation"], loaded.sample(64).observations["observation"])


@pytest.mark.parametrize("kwargs, words", [
    ({"episode_priority": "energy"}, "goal_motion"),
    ({"prioritized": True}, "pass one of them"),
    ({"online_sampling": False}, "online_sampling=True"),
    ({"goal_motion_scale": 0.0}, "goal_motion_scale"),
    ({"goal_motion_weight": -1.0}, "goal_motion_weight"),
    ({"goal_lift_weight": -1.0}, "goal_lift_weight"),
    ({"goal_lift_weight": 5.0, "episode_priority": None}, "episode_priority='goal_motion'"),
])
def test_bad_settings_are_refused_with_the_fix(kwargs, words):
    with pytest.raises(ValueError, match=words):
        make(**kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"episode_priority": None}, {"episode_priority": None, "online_sampling": False},
                                    {"optimize_memory_usage": True}, {"storage_device": "cpu"}])
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
