"""Prioritized replay: the sum tree's distribution, weights and updates, and its use by the buffers."""

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from herl import HerReplayBuffer, ReplayBuffer
from herl.buffers.priority import FANOUT, PriorityTree


def tree_with(priorities, alpha=1.0):
    tree = PriorityTree(len(priorities), alpha=alpha)
    tree.add_many(np.arange(len(priorities)))
    tree.update(np.arange(len(priorities)), np.asarray(priorities, dtype=float))
    return tree


@pytest.mark.parametrize("capacity", [1, 2, FANOUT, FANOUT + 1, FANOUT**2 + 3, 5000])
def test_sampling_frequencies_follow_priorities(capacity):
    rng = np.random.default_rng(0)
    priorities = rng.uniform(0.1, 2.0, capacity)
    tree = tree_with(priorities, alpha=0.6)
    draws = np.concatenate([tree.sample(1000, rng) for _ in range(200)])
    expected = priorities**0.6 / (priorities**0.6).sum()
    if capacity <= FANOUT + 1:
        counts = np.bincount(draws, minlength=capacity) / len(draws)
        np.testing.assert_allclose(counts, expected, atol=0.01)
    else:  # too many slots to check one by one: compare the mass of the upper half
        high = priorities > np.median(priorities)
        assert abs(high[draws].mean() - expected[high].sum()) < 0.01


def test_zero_priority_slots_are_never_sampled():
    tree = tree_with(np.ones(100))
    tree.remove(np.arange(0, 100, 2))
    draws = tree.sample(5000, np.random.default_rng(1))
    assert np.all(draws % 2 == 1)


def test_new_slots_get_the_maximum_priority_seen():
    big = PriorityTree(4, alpha=1.0)
    big.add_many([0, 1])
    big.update([0, 1], [1.0, 7.0])
    big.add(2)
    big.flush()
    assert big.sums[0][2] == pytest.approx(7.0)


def test_a_slot_removed_then_added_again_before_a_flush_is_live():
    tree = tree_with(np.ones(8))
    tree.remove([3])
    tree.add(3)
    tree.flush()
    assert tree.sums[0][3] > 0
    tree.add(4)
    tree.remove([4])
    tree.flush()
    assert tree.sums[0][4] == 0


def test_update_of_a_removed_slot_keeps_it_removed():
    tree = tree_with(np.ones(8))
    tree.remove([3])
    tree.update([3], [10.0])
    assert tree.sums[0][3] == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 299), st.floats(0.0, 50.0)), min_size=1, max_size=200))
def test_sums_and_mins_stay_exact_under_updates(updates):
    tree = tree_with(np.ones(300), alpha=1.0)
    for slot, priority in updates:
        tree.update([slot], [priority + 1e-3])
    leaves = tree.sums[0][:300]
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-12)
    assert tree.mins[-1][0] == pytest.approx(leaves[leaves > 0].min())


def test_weights_are_in_unit_interval_and_one_for_the_rarest():
    tree = tree_with([1.0, 2.0, 4.0, 8.0], alpha=1.0)
    weights = tree.weights(np.arange(4), beta=0.5, n_live=4)
    assert np.all((weights > 0) & (weights <= 1))
    assert weights[0] == pytest.approx(1.0)
    np.testing.assert_allclose(weights, (np.array([1, 2, 4, 8]) / 1.0) ** -0.5, rtol=1e-6)
    assert np.all(tree.weights(np.arange(4), beta=0.0, n_live=4) == 1)


def test_bad_priorities_are_rejected_with_the_fix():
    tree = tree_with(np.ones(4))
    with pytest.raises(ValueError, match="one priority per index"):
        tree.update([0, 1], [1.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update([0], [np.nan])
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        tree.update([9], [1.0])
    with pytest.raises(ValueError, match="beta"):
        tree.weights(np.arange(2), beta=1.5, n_live=4)


# ----------------------------------------------------------------------------------------- buffers
GOAL_SPACE = spaces.Dict(
    observation=spaces.Box(-10, 10, (2,), np.float32),
    achieved_goal=spaces.Box(-10, 10, (1,), np.float32),
    desired_goal=spaces.Box(-10, 10, (1,), np.float32),
)
ACTIONS = spaces.Box(-1, 1, (1,), np.float32)


def reward(achieved_goal, desired_goal, info):
    return -(np.abs(achieved_goal - desired_goal)[..., 0] > 0.5).astype(np.float32)


def fill(buffer, n_episodes=6, length=5):
    for episode in range(n_episodes):
        for t in range(length):
            obs = {"observation": np.array([[episode, t]], np.float32), "achieved_goal": np.array([[t]], np.float32),
                   "desired_goal": np.array([[9]], np.float32)}
            nxt = {**obs, "observation": np.array([[episode, t + 1]], np.float32), "achieved_goal": np.array([[t + 1]], np.float32)}
            buffer.add(obs, nxt, np.zeros((1, 1), np.float32), reward(nxt["achieved_goal"], nxt["desired_goal"], {}),
                       terminated=np.array([False]), truncated=np.array([t == length - 1]))


@pytest.mark.parametrize("online", [True, False])
def test_prioritized_her_buffer_returns_weights_and_learns_priorities(online):
    buffer = HerReplayBuffer(1000, GOAL_SPACE, ACTIONS, compute_reward=reward, prioritized=True, alpha=1.0,
                             online_sampling=online, max_episode_length=5, seed=0, device="cpu")
    fill(buffer)
    batch = buffer.sample(64)
    assert batch.weights.shape == (64, 1)
    assert np.all(batch.indexes >= 0)
    assert float(batch.weights.min()) > 0 and float(batch.weights.max()) <= 1
    # give one stored transition all the mass: it must dominate the next batches
    favourite = batch.indexes[0]
    buffer.update_priorities(batch.indexes, np.where(batch.indexes == favourite, 1000.0, 1e-3))
    again = buffer.sample(2000)
    assert np.mean(again.indexes == favourite) > 0.5


def test_overwritten_episodes_leave_the_priority_tree():
    buffer = ReplayBuffer(12, spaces.Box(-10, 10, (2,), np.float32), ACTIONS, prioritized=True, seed=0, device="cpu")
    for t in range(30):
        buffer.add(np.array([[t, 0]], np.float32), np.array([[t + 1, 0]], np.float32), np.zeros((1, 1), np.float32),
                   np.zeros(1), terminated=np.array([t % 3 == 2]))
    batch = buffer.sample(3000)
    assert batch.observations[:, 0].min() >= 18  # only the last 12 rows (4 episodes of 3) survive
    assert buffer.storage.priorities.total == pytest.approx(len(buffer) * 1.0 ** buffer.alpha)


def test_priorities_survive_save_and_load(tmp_path):
    buffer = HerReplayBuffer(1000, GOAL_SPACE, ACTIONS, compute_reward=reward, prioritized=True, seed=0, device="cpu")
    fill(buffer)
    batch = buffer.sample(32)
    buffer.update_priorities(batch.indexes, np.arange(32.0))
    buffer.save(tmp_path / "per.zip")
    loaded = HerReplayBuffer.load(tmp_path / "per.zip", compute_reward=reward, device="cpu")
    np.testing.assert_array_equal(loaded.storage.priorities.sums[0], buffer.storage.priorities.sums[0])
    assert loaded.storage.priorities.max_priority == buffer.storage.priorities.max_priority
    np.testing.assert_array_equal(loaded.sample(16).indexes, buffer.sample(16).indexes)


def test_update_priorities_needs_a_prioritized_buffer():
    buffer = HerReplayBuffer(100, GOAL_SPACE, ACTIONS, compute_reward=reward, device="cpu")
    with pytest.raises(ValueError, match="prioritized=True"):
        buffer.update_priorities(np.arange(2), np.ones(2))
