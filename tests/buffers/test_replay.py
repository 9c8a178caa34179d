"""Plain ReplayBuffer: Box observations and Discrete actions, shapes, uniformity, wrap-around, dones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from her_world import assert_same_arrays, snapshot
from herl.buffers import ReplayBuffer

OBS = spaces.Box(-1e6, 1e6, (4,), np.float32)


def stamped(i: int, n_envs: int = 1, env_offset: int = 0) -> np.ndarray:
    """Observation i of each env: [i, env, 0, 0]."""
    out = np.zeros((n_envs, 4), np.float32)
    out[:, 0] = i
    out[:, 1] = np.arange(n_envs) + env_offset
    return out


def fill(buffer, n, *, episode=5, n_envs=1, done_every=None):
    """n adds; transition i has obs [i, env], next obs [i + 1, env], action i % 3, reward i; episodes of ``episode``."""
    for i in range(n):
        done = np.full(n_envs, (i + 1) % episode == 0)
        buffer.add(stamped(i, n_envs), stamped(i + 1, n_envs), np.full(n_envs, i % 3), np.full(n_envs, float(i)),
                   done, [{}] * n_envs)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("n_envs", [1, 3])
def test_shapes_and_types(n_envs, share):
    buffer = ReplayBuffer(60, OBS, spaces.Discrete(3), device="cpu", n_envs=n_envs, optimize_memory_usage=share, seed=0)
    fill(buffer, 12, n_envs=n_envs)
    batch = buffer.sample(17)
    assert type(batch).__name__ == "ReplayBufferSamples"
    assert batch.observations.shape == batch.next_observations.shape == (17, 4)
    assert batch.observations.dtype == torch.float32
    assert batch.actions.shape == (17, 1) and batch.actions.dtype == torch.int64
    assert batch.rewards.shape == batch.dones.shape == (17, 1)
    assert all(t.device.type == "cpu" for t in (batch.observations, batch.actions, batch.rewards, batch.dones))
    # every row is one stored transition
    i = batch.observations[:, 0]
    np.testing.assert_array_equal(batch.next_observations[:, 0], i + 1)
    np.testing.assert_array_equal(batch.next_observations[:, 1], batch.observations[:, 1])
    np.testing.assert_array_equal(batch.actions[:, 0], i.long() % 3)
    np.testing.assert_array_equal(batch.rewards[:, 0], i)
    np.testing.assert_array_equal(batch.dones[:, 0], ((i + 1) % 5 == 0).float())


@pytest.mark.parametrize("share", [False, True])
def test_sampling_is_uniform_over_stored_transitions(share):
    buffer = ReplayBuffer(100, OBS, spaces.Discrete(3), device="cpu", optimize_memory_usage=share, seed=1)
    fill(buffer, 40, episode=8)
    batch = buffer.sample(40_000)
    counts = np.bincount(batch.observations[:, 0].numpy().astype(int), minlength=40)
    assert len(counts) == 40
    expected = 1000
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 100, counts  # df = 39; p < 1e-6 beyond ~95
    assert np.abs(counts / expected - 1).max() < 0.15


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("n_envs", [1, 2])
def test_wrap_around_keeps_only_recent_whole_episodes(n_envs, share):
    """A 20-row column and episodes of 5 transitions: after 53 adds only transitions of the newest episodes remain,
    and never the older part of an episode whose first rows were overwritten."""
    rows = 20
    buffer = ReplayBuffer(rows * n_envs, OBS, spaces.Discrete(3), device="cpu", n_envs=n_envs,
                          optimize_memory_usage=share, seed=2)
    fill(buffer, 53, episode=5, n_envs=n_envs)
    i = buffer.sample(5000).observations[:, 0].numpy().astype(int)
    # rows written per column: separate layout 53; shared 10 episodes * 6 rows + 4 = 64. An episode starting at
    # (unbounded) row s is whole while fewer than s + 20 rows were written: s >= 33 (episode 7, transition 35)
    # or s >= 44 (episode 8 starts at row 48, transition 40).
    oldest = 40 if share else 35
    assert set(np.unique(i)) == set(range(oldest, 53))
    assert len(buffer) == (53 - oldest) * n_envs


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("episode", [10**9, 37])
def test_an_endless_stream_keeps_the_newest_transitions_like_sb3(episode, n_envs, share):
    """Regression (fixed in ce12929; it raised ValueError): a stream without episode ends, or episodes longer than
    the buffer, overwrite the oldest transitions, as SB3's ReplayBuffer does."""
    buffer = ReplayBuffer(10 * n_envs, OBS, spaces.Discrete(3), device="cpu", n_envs=n_envs,
                          optimize_memory_usage=share, seed=0)
    fill(buffer, 95, episode=episode, n_envs=n_envs)
    batch = buffer.sample(2000)
    i = batch.observations[:, 0].numpy().astype(int)
    np.testing.assert_array_equal(batch.next_observations[:, 0], i + 1)  # each row one real transition
    np.testing.assert_array_equal(batch.next_observations[:, 1], batch.observations[:, 1])
    np.testing.assert_array_equal(batch.rewards[:, 0], i)
    assert i.max() == 94 and i.min() >= 85 - share
    assert set(np.unique(i)) == set(range(i.min(), 95))


def test_timeouts_bootstrap():
    buffer = ReplayBuffer(10, OBS, spaces.Discrete(3), device="cpu", seed=0)
    buffer.add(stamped(0), stamped(1), np.array([0]), np.array([0.0]), np.array([True]), [{"TimeLimit.truncated": True}])
    buffer.add(stamped(1), stamped(2), np.array([0]), np.array([0.0]), np.array([True]), [{}])
    batch = buffer.sample(200)
    np.testing.assert_array_equal(batch.dones[:, 0], (batch.observations[:, 0] == 1).float())
    legacy = ReplayBuffer(10, OBS, spaces.Discrete(3), device="cpu", handle_timeout_termination=False, seed=0)
    legacy.add(stamped(0), stamped(1), np.array([0]), np.array([0.0]), np.array([True]), [{"TimeLimit.truncated": True}])
    assert (legacy.sample(20).dones == 1).all()


def test_gymnasium_vector_infos_mark_truncation():
    """Gymnasium vector envs report infos as a dict of arrays."""
    buffer = ReplayBuffer(20, OBS, spaces.Discrete(3), device="cpu", n_envs=2, seed=0)
    buffer.add(stamped(0, 2), stamped(1, 2), np.array([0, 1]), np.zeros(2), np.array([True, True]),
               {"TimeLimit.truncated": np.array([True, False])})
    batch = buffer.sample(300)
    np.testing.assert_array_equal(batch.dones[:, 0], batch.observations[:, 1])  # env 1 terminated, env 0 truncated


def test_sampling_does_not_mutate_and_batches_do_not_alias():
    buffer = ReplayBuffer(30, OBS, spaces.Box(-1, 1, (2,), np.float32), device="cpu", seed=0)
    for i in range(12):
        buffer.add(stamped(i), stamped(i + 1), np.full((1, 2), 0.5, np.float32), np.array([1.0]),
                   np.array([i % 4 == 3]), [{}])
    before = snapshot(buffer)
    for _ in range(10):
        batch = buffer.sample(64)
        batch.observations.add_(7)
        batch.actions.zero_()
    assert_same_arrays(before, snapshot(buffer))


def test_sb3_counters():
    buffer = ReplayBuffer(8, OBS, spaces.Discrete(3), device="cpu", seed=0)
    assert (buffer.pos, buffer.full, buffer.size(), len(buffer)) == (0, False, 0, 0)
    fill(buffer, 6, episode=2)
    assert (buffer.pos, buffer.full, buffer.size(), len(buffer)) == (6, False, 6, 6)
    fill(buffer, 4, episode=2)
    assert buffer.full and buffer.size() == 8
    buffer.reset()
    assert len(buffer) == 0
    with pytest.raises(ValueError, match="add transitions first"):
        buffer.sample(1)


def test_discrete_observations():
    buffer = ReplayBuffer(10, spaces.Discrete(6), spaces.Discrete(2), device="cpu", n_envs=2, seed=0)
    buffer.add(np.array([1, 2]), np.array([3, 4]), np.array([0, 1]), np.zeros(2), np.array([True, True]), [{}, {}])
    batch = buffer.sample(50)
    assert batch.observations.shape == (50, 1)
    np.testing.assert_array_equal(batch.next_observations - batch.observations, np.full((50, 1), 2))


def test_done_with_a_truncated_keyword_is_refused_not_ignored():
    """The SB3 form reads truncation from infos: a truncated= beside done would be silently dropped."""
    space = spaces.Box(-1, 1, (2,), np.float32)
    buffer = ReplayBuffer(10, space, space)
    with pytest.raises(ValueError, match="done and truncated"):
        buffer.add(np.zeros(2), np.zeros(2), np.zeros(2), 0.0, np.array([True]), truncated=np.array([True]))
    assert buffer.size() == 0


def test_a_buffer_of_one_transition_per_env_keeps_two_and_says_so():
    """SB3 takes buffer_size=1 (its tests pass it); herl's episode storage needs two rows per env: it keeps two, warns,
    and stores and samples as usual (the newest replacing the oldest)."""
    from gymnasium import spaces

    from herl.buffers import ReplayBuffer

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.warns(UserWarning, match="buffer_size=1 with n_envs=1 is fewer than 2 transitions per env"):
        buffer = ReplayBuffer(1, box, box)
    assert buffer.buffer_size == 2
    for step in range(5):
        value = np.full((1, 2), step / 10, np.float32)
        buffer.add(value, value + 0.05, value, np.array([step], np.float32), np.array([True]), [{}])
    assert len(buffer) == 2
    assert set(buffer.sample(16).rewards.flatten().tolist()) == {3.0, 4.0}
