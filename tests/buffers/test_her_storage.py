"""Circular episode storage under HER: wrap-around, parallel envs, open episodes, truncation, no mutation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from her_world import NO_GOAL, IdWorld, assert_same_arrays, id_reward, id_spaces, snapshot
from herl.buffers import EpisodeStorage, FieldSpec, HerReplayBuffer


def her(capacity, *, n_envs=1, share=False, strategy="future", k=4, online=True, max_len=None, **kwargs):
    obs_space, action_space = id_spaces()
    return HerReplayBuffer(capacity, obs_space, action_space, device="cpu", n_envs=n_envs, optimize_memory_usage=share,
                           n_sampled_goal=k, goal_selection_strategy=strategy, compute_reward=id_reward,
                           online_sampling=online, max_episode_length=max_len, seed=kwargs.pop("seed", 0), **kwargs)


def sampled_episodes(batch) -> set[tuple[int, int]]:
    ids = batch.observations["observation"].numpy().astype(int)
    return set(map(tuple, ids[:, :2].tolist()))


# ---------------------------------------------------------------------------------------------------- wrap-around
@pytest.mark.parametrize("share", [False, True])
def test_a_partly_overwritten_episode_is_never_sampled(share):
    """10 rows, episodes of 4 transitions (5 rows when states are shared): writing the third episode overwrites the
    first one's first row, and all of the first episode goes, even its rows not yet overwritten."""
    buffer = her(10, share=share, k=4)
    world = IdWorld(buffer, [[4]], rows=10, share=share)
    open_part = 1 if share else 3  # separate: episode 2 takes rows 8, 9 and then 0
    world.run(8 + open_part - 1)
    assert sampled_episodes(buffer.sample(3000)) == {(0, 0), (0, 1)} | ({(0, 2)} if open_part > 1 else set())
    world.run(1)
    batch = buffer.sample(3000)
    world.check(batch, "future")
    assert sampled_episodes(batch) == {(0, 1), (0, 2)}
    assert len(buffer) == 4 + open_part
    assert set(batch.observations["desired_goal"].numpy()[:, 1].astype(int)) == {1, 2}


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_parallel_envs_ending_at_different_steps_never_mix(share, strategy):
    """Two envs whose episodes have different lengths (3 and 5, then 7 and 2): episodes never mix, across
    many wrap-arounds of each env's column."""
    buffer = her(2 * 17, n_envs=2, share=share, strategy=strategy)
    world = IdWorld(buffer, [[3, 7], [5, 2]], rows=17, share=share)
    for _ in range(12):
        world.run(5)
        batch = buffer.sample(500)
        world.check(batch, strategy)
        goals = batch.observations["desired_goal"].numpy()
        obs = batch.observations["observation"].numpy()
        relabeled = goals[:, 2] != NO_GOAL
        if strategy != "random":
            np.testing.assert_array_equal(goals[relabeled, :2], obs[relabeled, :2])


def test_len_counts_sampleable_transitions():
    buffer = her(2 * 12, n_envs=2)
    world = IdWorld(buffer, [[3], [5]], rows=12, share=False)
    for _ in range(40):
        world.run(1)
        expected = sum(world.stored_length(ep) for ep in world.sampleable())
        assert len(buffer) == expected


@pytest.mark.parametrize("share", [False, True])
def test_every_stored_transition_is_equally_likely(share):
    """Uniform over the transitions of intact episodes, open ones included, after wrap-around."""
    buffer = her(2 * 15, n_envs=2, share=share, k=0)
    world = IdWorld(buffer, [[4, 2, 5], [3, 6]], rows=15, share=share)
    world.run(23)
    cells = [(ep.env, ep.ep, t) for ep in world.sampleable() for t in range(world.stored_length(ep))]
    batch = buffer.sample(40 * len(cells) * 20)
    world.check(batch, "future")
    ids = batch.observations["observation"].numpy().astype(int)
    index = {cell: i for i, cell in enumerate(cells)}
    counts = np.bincount([index[tuple(row)] for row in ids.tolist()], minlength=len(cells))
    expected = len(ids) / len(cells)
    assert (counts > 0).all()
    assert np.abs(counts / expected - 1).max() < 0.15, counts


# ---------------------------------------------------------------------------------------------------- open episodes
@pytest.mark.parametrize("share", [False, True])
def test_final_of_an_open_episode_is_its_last_stored_state(share):
    buffer = her(40, share=share, strategy="final", k=1_000_000)
    world = IdWorld(buffer, [[30]], rows=40, share=share)
    for n in (1, 2, 7):
        world.run(n - world.episodes[(0, 0)].added if (0, 0) in world.episodes else n)
        batch = buffer.sample(200)
        world.check(batch, "final")
        assert (batch.observations["desired_goal"][:, 2] == n).all()


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("share", [False, True])
def test_truncate_last_trajectory_closes_running_episodes(share, online):
    buffer = her(60, n_envs=2, share=share, strategy="final", k=4, online=online, max_len=20)
    world = IdWorld(buffer, [[20], [20]], rows=30, share=share, online=online)
    world.run(6)
    world.truncate_last_trajectory()
    batch = buffer.sample(2000)
    world.check(batch, "final")  # final goals: step 6, the last stored state
    relabeled = batch.observations["desired_goal"][:, 2] != NO_GOAL
    assert (batch.observations["desired_goal"][relabeled, 2] == 6).all()
    # the last transition is truncated, not terminated: it bootstraps
    assert (batch.dones == 0).all()
    if online:
        arrays = buffer.storage.arrays()
        last = arrays["state/observation"][..., 2] == 5  # the rows of transition 5 (separate and shared layouts)
        assert arrays["transition/truncated"][last].all() and not arrays["transition/terminated"].any()
        assert buffer.storage.n_open == 0
    # new episodes start cleanly after it
    world.run(8)
    world.check(buffer.sample(2000), "final")


def test_truncate_last_trajectory_without_handle_timeout_termination_marks_done():
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(30, obs_space, action_space, device="cpu", compute_reward=id_reward, n_sampled_goal=0,
                             handle_timeout_termination=False, seed=0)
    IdWorld(buffer, [[20]], rows=30, share=False).run(5)
    buffer.truncate_last_trajectory()
    batch = buffer.sample(500)
    t = batch.observations["observation"][:, 2]
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), (t == 4).numpy().astype(np.float32))


def test_truncate_last_trajectory_with_nothing_open_is_harmless():
    buffer = her(30)
    world = IdWorld(buffer, [[3]], rows=30, share=False)
    world.run(6)  # two complete episodes, nothing open
    before = snapshot(buffer)
    buffer.truncate_last_trajectory()
    assert_same_arrays(before, snapshot(buffer))


# ---------------------------------------------------------------------------------------------------- capacity
@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("share", [False, True])
def test_an_episode_longer_than_a_column_raises_a_clear_error(share, n_envs):
    rows = 8
    buffer = her(rows * n_envs, n_envs=n_envs, share=share)
    world = IdWorld(buffer, [[rows - share]] * n_envs, rows=rows, share=share)
    world.run(rows - share)  # the longest episode that fits is fine
    world.check(buffer.sample(100), "future")
    world = IdWorld(her(rows * n_envs, n_envs=n_envs, share=share), [[rows + 5]] * n_envs, rows=rows, share=share)
    with pytest.raises(ValueError, match="buffer_size") as info:
        world.run(rows + 5)
    assert "longer than" in str(info.value)


def test_offline_episode_longer_than_max_episode_length_names_the_fix():
    """Regression (fixed in ce12929): the error said "raise buffer_size"; offline the staging area is sized by
    max_episode_length."""
    buffer = her(1000, online=False, max_len=5)
    world = IdWorld(buffer, [[12]], rows=6, share=False, online=False)
    with pytest.raises(ValueError, match="max_episode_length"):
        world.run(12)


@pytest.mark.parametrize("episode_rows", [1, 10])
def test_window_never_exceeds_the_column(episode_rows):
    """Regression (fixed in 58a7cf5): capacity 100, optimize_memory_usage=True, episodes of 10 transitions (11 rows
    each). The 10th episode's first state goes to row 99; the sampling window became 101 > 100 and sampling
    indexed past the arrays (IndexError). The same with capacity 3 and one-step episodes."""
    rows = 3 if episode_rows == 1 else 100
    buffer = her(rows, share=True)
    world = IdWorld(buffer, [[episode_rows]], rows=rows, share=True)
    for _ in range(rows // (episode_rows + 1) + 1):
        world.run(episode_rows)
        world.check(buffer.sample(256), "future")


# ---------------------------------------------------------------------------------------------------- no mutation
@pytest.mark.parametrize("storage_device", [None, "cpu"])
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_sampling_never_mutates_storage(strategy, share, online, storage_device):
    buffer = her(2 * 20, n_envs=2, share=share, strategy=strategy, online=online, max_len=6,
                 storage_device=storage_device)
    world = IdWorld(buffer, [[4, 6], [5, 3]], rows=20, share=share, online=online)
    world.run(27)
    before = snapshot(buffer)
    for _ in range(20):
        batch = buffer.sample(128)
        # and editing a returned batch in place does not reach storage either
        for tensors in (batch.observations, batch.next_observations):
            for tensor in tensors.values():
                tensor += 1000
        batch.actions.zero_()
        batch.rewards.fill_(-5)
        batch.dones.fill_(1)
    assert_same_arrays(before, snapshot(buffer))
    world.check(buffer.sample(500), strategy)


def test_plain_replay_batches_do_not_alias_storage():
    buffer = her(30, k=0)
    IdWorld(buffer, [[5]], rows=30, share=False).run(12)
    before = snapshot(buffer)
    batch = buffer.sample(64)
    batch.observations["desired_goal"].add_(3)
    assert torch.all(buffer.sample(64).observations["desired_goal"][:, 2] == NO_GOAL)
    assert_same_arrays(before, snapshot(buffer))


# ---------------------------------------------------------------------------------------------------- EpisodeStorage
def test_episode_storage_direct_use():
    """The storage alone: two envs, episodes of lengths 2 and 3, rows hold the right states and book-keeping."""
    spec = {"x": FieldSpec((2,), np.dtype(np.float32))}
    storage = EpisodeStorage(rows=6, n_envs=2, state_fields=spec,
                             transition_fields={"r": FieldSpec((), np.dtype(np.float32))}, share_states=True)
    for t in range(3):
        states = {"x": np.array([[0, t], [1, t]], np.float32)}
        next_states = {"x": np.array([[0, t + 1], [1, t + 1]], np.float32)}
        done = np.array([t == 1, t == 2])
        storage.add(states, next_states, {"r": np.array([t, t], np.float32)}, done)
    assert storage.n_transitions == 2 + 1 + 3  # env 0: a closed episode of 2 and an open one of 1; env 1: 3
    np.testing.assert_array_equal(storage.open_len, [1, 0])
    flat = storage.sample_flat(2000, np.random.default_rng(0))
    offsets, lengths = storage.episode_position(flat)
    x = storage.field("s", "x", flat)
    nx = storage.next_state("x", flat)
    np.testing.assert_array_equal(nx[:, 1], x[:, 1] + 1)
    np.testing.assert_array_equal(nx[:, 0], x[:, 0])
    env0_closed = (x[:, 0] == 0) & (lengths == 2)
    np.testing.assert_array_equal(offsets[env0_closed], x[env0_closed, 1])
    env1 = x[:, 0] == 1
    assert (lengths[env1] == 3).all()
    np.testing.assert_array_equal(offsets[env1], x[env1, 1])
    with pytest.raises(ValueError, match="buffer_size"):
        EpisodeStorage(rows=1, n_envs=1, state_fields=spec, transition_fields={}, share_states=False)
