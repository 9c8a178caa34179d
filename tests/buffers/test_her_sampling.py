"""HER sampling: uniform goal offsets, relabel ratio, how compute_reward is called, dones, infos, tensors."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from her_world import NO_GOAL, IdWorld, assert_same_arrays, id_reward, id_spaces, snapshot
from herl.buffers import HerReplayBuffer
from herl.buffers.goal_functions import InfoBatch
from herl.buffers.strategies import GoalSelectionStrategy, sample_goal_offsets, uniform_integers
from herl.envs import BitFlippingEnv, PointReachEnv


def chi2_critical(df: int, p: float = 1e-6) -> float:
    """Upper ``p`` quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty; good for df >= 1)."""
    # z for the upper tail p, by bisection on the normal survival function
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(mid / math.sqrt(2)) > p:
            lo = mid
        else:
            hi = mid
    z = lo
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def assert_uniform(counts: np.ndarray, what: str) -> None:
    """Counts of equally likely outcomes: a chi-square test, and no cell off by more than 10 %."""
    counts = np.asarray(counts, dtype=float)
    expected = counts.sum() / len(counts)
    assert expected >= 500, "too few draws for the test to mean anything"
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < chi2_critical(len(counts) - 1), f"{what}: counts {counts.tolist()} are not uniform (chi2={chi2:.1f})"
    assert np.all(np.abs(counts / expected - 1) < 0.1), f"{what}: counts {counts.tolist()}, expected {expected:.0f} each"


def one_env_buffer(strategy="future", k=4, *, lengths=(6,), n_adds=None, capacity=200, seed=0, **kwargs):
    obs_space, action_space = id_spaces()
    kwargs.setdefault("compute_reward", id_reward)
    buffer = HerReplayBuffer(capacity, obs_space, action_space, device="cpu", n_sampled_goal=k,
                             goal_selection_strategy=strategy, seed=seed, max_episode_length=max(lengths), **kwargs)
    world = IdWorld(buffer, [list(lengths)], rows=capacity, share=kwargs.get("optimize_memory_usage", False),
                    online=kwargs.get("online_sampling", True))
    world.run(n_adds if n_adds is not None else sum(lengths) * 3)
    return buffer, world


# ---------------------------------------------------------------------------------------------------- goal offsets
def assert_future_offsets_uniform(t: np.ndarray, g: np.ndarray, L: int) -> None:
    relabeled = g != NO_GOAL
    for step in range(L - 1):  # the last transition has a single choice
        offsets = g[relabeled & (t == step)] - (step + 1)
        assert offsets.min() >= 0 and offsets.max() <= L - 1 - step
        assert_uniform(np.bincount(offsets, minlength=L - step), f"future goals of transition {step}")


@pytest.mark.parametrize("share", [False, True])
def test_future_offsets_are_uniform_including_both_end_points(share):
    """Transition t of an episode of length L gets the next achieved goal of a step drawn uniformly from t..L-1.

    Rounding a uniform float (a peer's bug) halves the probability of offset t and of the last state.
    """
    L = 6
    buffer, world = one_env_buffer("future", k=1000, lengths=(L,), n_adds=L * 12, capacity=1000,
                                   optimize_memory_usage=share)
    batch = buffer.sample(60_000)
    world.check(batch, "future")
    t = batch.observations["observation"][:, 2].numpy().astype(int)
    g = batch.observations["desired_goal"][:, 2].numpy().astype(int)
    assert_future_offsets_uniform(t, g, L)


def test_offline_future_offsets_are_uniform_including_both_end_points():
    """Offline relabeling draws its goals once, at episode end: count the stored copies themselves."""
    L = 6
    buffer, world = one_env_buffer("future", k=100, lengths=(L,), n_adds=L * 100, capacity=L * 101 * 100,
                                   online_sampling=False)
    world.check(buffer.sample(2000), "future")
    stored = buffer.relabeled.arrays()
    used = stored["is_transition"][:, 0]
    t = stored["state/observation"][used, 0, 2].astype(int)
    g = stored["state/desired_goal"][used, 0, 2].astype(int)
    assert (g == NO_GOAL).sum() == L * 100  # each transition once as it happened ...
    assert (g != NO_GOAL).sum() == L * 100 * 100  # ... and k times relabeled
    assert_future_offsets_uniform(t, g, L)


def test_episode_goals_are_uniform_over_the_episodes_next_states():
    L = 5
    buffer, world = one_env_buffer("episode", k=1000, lengths=(L,), n_adds=L * 10)
    batch = buffer.sample(40_000)
    world.check(batch, "episode")
    g = batch.observations["desired_goal"][:, 2].numpy().astype(int)
    assert_uniform(np.bincount(g[g != NO_GOAL] - 1, minlength=L), "episode goals")


def test_random_goals_are_uniform_over_stored_complete_transitions():
    """Three complete episodes (lengths 2, 3, 4) and an open one: goals come from the 9 complete next states."""
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(100, obs_space, action_space, device="cpu", n_sampled_goal=1000,
                             goal_selection_strategy="random", compute_reward=id_reward, seed=1)
    world = IdWorld(buffer, [[2, 3, 4, 50]], rows=100, share=False)
    world.run(2 + 3 + 4 + 5)
    batch = buffer.sample(50_000)
    world.check(batch, "random")
    g = batch.observations["desired_goal"].numpy().astype(int)
    g = g[g[:, 2] != NO_GOAL]
    assert set(np.unique(g[:, 1])) == {0, 1, 2}, "random goals must come from complete episodes only"
    cells = [(ep, t) for ep, length in enumerate([2, 3, 4]) for t in range(1, length + 1)]
    counts = [np.count_nonzero((g[:, 1] == ep) & (g[:, 2] == t)) for ep, t in cells]
    assert_uniform(counts, "random goals")


def test_uniform_integers_reach_both_ends_equally():
    rng = np.random.default_rng(0)
    low = np.zeros(200_000, dtype=np.int64)
    draws = uniform_integers(rng, low, 4)
    assert draws.dtype.kind == "i" and draws.min() == 0 and draws.max() == 3
    assert_uniform(np.bincount(draws, minlength=4), "uniform_integers")


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=50), seed=st.integers(0, 2**32 - 1))
def test_sample_goal_offsets_stay_in_range(lengths, seed):
    rng = np.random.default_rng(seed)
    lengths = np.array(lengths, dtype=np.int64)
    offsets = (rng.random(len(lengths)) * lengths).astype(np.int64)
    future = sample_goal_offsets(GoalSelectionStrategy.FUTURE, offsets, lengths, rng)
    assert ((offsets <= future) & (future < lengths)).all()
    np.testing.assert_array_equal(sample_goal_offsets(GoalSelectionStrategy.FINAL, offsets, lengths, rng), lengths - 1)
    episode = sample_goal_offsets(GoalSelectionStrategy.EPISODE, offsets, lengths, rng)
    assert ((0 <= episode) & (episode < lengths)).all()


# ---------------------------------------------------------------------------------------------------- relabel ratio
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_relabeled_fraction_is_k_over_k_plus_1(k, online):
    buffer, world = one_env_buffer("future", k=k, lengths=(5, 7), n_adds=60, capacity=2000, online_sampling=online)
    n = 20_000
    counts = world.check(buffer.sample(n), "future")
    p = k / (k + 1)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(counts["relabeled"] - n * p) < 5 * sigma, f"{counts['relabeled']} of {n} relabeled, expected {p:.3f}"


@pytest.mark.parametrize("online", [True, False])
def test_zero_sampled_goals_is_plain_replay(online):
    """k = 0: no compute_reward is needed, every sample keeps its stored goal and reward."""
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(200, obs_space, action_space, device="cpu", n_sampled_goal=0, online_sampling=online,
                             max_episode_length=10, seed=0)
    world = IdWorld(buffer, [[4, 6]], rows=200, share=False, online=online)
    world.run(37)
    batch = buffer.sample(5000)
    assert world.check(batch, "future")["relabeled"] == 0
    assert (batch.observations["desired_goal"][:, 2] == NO_GOAL).all()


def test_zero_sampled_goals_never_calls_compute_reward():
    calls = []

    def reward(achieved_goal, desired_goal, info):
        calls.append(len(achieved_goal))
        return id_reward(achieved_goal, desired_goal)

    buffer, _ = one_env_buffer("future", k=0, compute_reward=reward)
    calls.clear()  # the construction-time probe
    buffer.sample(256)
    assert calls == []


# ---------------------------------------------------------------------------------------------------- compute_reward
class CountingReward:
    def __init__(self):
        self.calls = []

    def __call__(self, achieved_goal, desired_goal, info):
        self.calls.append((np.array(achieved_goal), np.array(desired_goal), info))
        return id_reward(achieved_goal, desired_goal)


@pytest.mark.parametrize("online", [True, False])
def test_compute_reward_is_called_once_per_batch(online):
    fn = CountingReward()
    buffer, world = one_env_buffer("future", k=4, compute_reward=fn, online_sampling=online, n_adds=6)  # one episode
    fn.calls.clear()
    if online:
        for _ in range(5):
            batch = buffer.sample(256)
            assert len(fn.calls) == 1, f"compute_reward called {len(fn.calls)} times for one sample()"
            achieved, desired, info = fn.calls.pop()
            n_relabeled = int((batch.observations["desired_goal"][:, 2] != NO_GOAL).sum())
            assert achieved.shape == desired.shape == (n_relabeled, 3)
            assert isinstance(info, InfoBatch) and len(info) == n_relabeled
    else:  # relabeling happened when episodes ended: one call per ended episode, none when sampling
        buffer.sample(256)
        assert fn.calls == []
        world.run(6)  # ends one more episode
        assert len(fn.calls) == 1 and fn.calls[0][0].shape == (4 * 6, 3)


def keyword_only(*, achieved_goal, desired_goal, info):
    return id_reward(achieved_goal, desired_goal)


def swapped_names(desired_goal, achieved_goal, info):
    """Parameters in the 'wrong' order: only keyword passing gives the right reward."""
    return id_reward(achieved_goal, desired_goal)


def robotics_style(achieved_goal, goal, info):  # gymnasium-robotics names the desired goal "goal"
    return id_reward(achieved_goal, goal)


def positional(a, b, c):  # no recognizable names: (achieved, desired, info) in that order
    return id_reward(a, b)


def two_arguments(achieved_goal, desired_goal):
    return id_reward(achieved_goal, desired_goal)


def varargs_after_the_goals(achieved_goal, desired_goal, *args):  # the info goes into *args
    assert len(args) == 1 and isinstance(args[0], InfoBatch)
    return id_reward(achieved_goal, desired_goal)


def varargs_swapped(desired_goal, achieved_goal, *args):  # goals by keyword, so *args gets nothing
    assert args == ()
    return id_reward(achieved_goal, desired_goal)


@pytest.mark.parametrize("fn", [keyword_only, swapped_names, robotics_style, positional, two_arguments, id_reward,
                                varargs_after_the_goals, varargs_swapped])
def test_compute_reward_gets_achieved_and_desired_goal_in_the_right_places(fn):
    """id_reward is asymmetric: a swap of achieved and desired goals gives other values and fails the check."""
    buffer, world = one_env_buffer("future", k=4, compute_reward=fn)
    batch = buffer.sample(2000)
    world.check(batch, "future")  # asserts reward == id_reward(next achieved goal, new goal) row by row
    relabeled = batch.observations["desired_goal"][:, 2] != NO_GOAL
    assert relabeled.sum() > 1000


def test_a_swapped_reward_would_be_caught():
    """The check above is not vacuous: passing goals the other way round gives different rewards."""
    def swapped(achieved_goal, desired_goal, info):
        return id_reward(desired_goal, achieved_goal)

    buffer, world = one_env_buffer("future", k=4, compute_reward=swapped)
    with pytest.raises(AssertionError):
        world.check(buffer.sample(500), "future")


def test_compute_reward_that_edits_its_arguments_cannot_touch_storage():
    def vandal(achieved_goal, desired_goal, info):
        rewards = id_reward(achieved_goal, desired_goal)
        achieved_goal += 100
        desired_goal[...] = 7
        return rewards

    buffer, _ = one_env_buffer("future", k=4, compute_reward=vandal)
    before = snapshot(buffer)
    for _ in range(5):
        buffer.sample(300)
    assert_same_arrays(before, snapshot(buffer))


# ---------------------------------------------------------------------------------------------------- dones
def add_one_episode(buffer, length, *, end, form):
    """Store one episode of ``length`` steps ending with ``end`` in {"terminated", "truncated"}."""
    for t in range(length):
        obs = {"observation": [[0, 0, t]], "achieved_goal": [[0, 0, t]], "desired_goal": [[0, 0, NO_GOAL]]}
        nxt = {"observation": [[0, 0, t + 1]], "achieved_goal": [[0, 0, t + 1]], "desired_goal": [[0, 0, NO_GOAL]]}
        obs = {k: np.array(v, np.float32) for k, v in obs.items()}
        nxt = {k: np.array(v, np.float32) for k, v in nxt.items()}
        last = t == length - 1
        reward = id_reward(nxt["achieved_goal"], nxt["desired_goal"])
        terminated, truncated = last and end == "terminated", last and end == "truncated"
        action = np.zeros((1, 3), np.float32)
        if form == "sb3":
            buffer.add(obs, nxt, action, reward, np.array([terminated or truncated]),
                       [{"TimeLimit.truncated": truncated}])
        else:
            buffer.add(obs, nxt, action, reward, terminated=np.array([terminated]), truncated=np.array([truncated]))


@pytest.mark.parametrize("k", [0, 4])
@pytest.mark.parametrize("form", ["sb3", "keyword"])
@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_dones_are_terminations_only(end, form, k):
    """A time limit is truncation, not termination: bootstrap through it (done = 0)."""
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(50, obs_space, action_space, device="cpu", n_sampled_goal=k, compute_reward=id_reward, seed=0)
    add_one_episode(buffer, 4, end=end, form=form)
    batch = buffer.sample(2000)
    t = batch.observations["observation"][:, 2].numpy()
    dones = batch.dones[:, 0].numpy()
    assert (dones[t < 3] == 0).all()
    assert (t == 3).any()
    assert (dones[t == 3] == (1.0 if end == "terminated" else 0.0)).all()


@pytest.mark.parametrize("form", ["sb3", "keyword"])
def test_without_timeout_handling_truncation_counts_as_done(form):
    """handle_timeout_termination=False is SB3's old behaviour: every episode end is a done."""
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(50, obs_space, action_space, device="cpu", compute_reward=id_reward,
                             handle_timeout_termination=False, seed=0)
    add_one_episode(buffer, 4, end="truncated", form=form)
    batch = buffer.sample(1000)
    t = batch.observations["observation"][:, 2].numpy()
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), (t == 3).astype(np.float32))


def bit_flipping_rollout(buffer, env, n_episodes, *, seed, form="keyword", n_envs=1):
    """Random-policy episodes of a goal env stored in ``buffer`` (single env)."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    stored = 0
    while stored < n_episodes:
        action = env.action_space.sample()
        nxt, reward, terminated, truncated, info = env.step(action)
        batched = lambda o: {k: np.asarray(v)[None] for k, v in o.items()}  # noqa: E731
        a = np.asarray(action).reshape(1, -1)
        if form == "keyword":
            buffer.add(batched(obs), batched(nxt), a, np.array([reward]), terminated=np.array([terminated]),
                       truncated=np.array([truncated]), infos=[info])
        else:  # as SB3's VecEnv reports it: a time limit only counts when the episode did not terminate
            buffer.add(batched(obs), batched(nxt), a, np.array([reward]), np.array([terminated or truncated]),
                       [{**info, "TimeLimit.truncated": truncated and not terminated}])
        obs = nxt
        if terminated or truncated:
            stored += 1
            obs, _ = env.reset()
    return buffer


@pytest.mark.parametrize("form", ["keyword", "sb3"])
@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_bit_flipping_relabeled_success_terminates(strategy, form):
    """Bit flipping ends on success: a relabeled transition whose new goal is its next achieved goal gets done = 1
    and reward 0 (compute_terminated from the env), all others done = 0 and reward -1."""
    env = BitFlippingEnv(n_bits=3, max_steps=6, random_goal=True)
    buffer = HerReplayBuffer(400, env.observation_space, env.action_space, env=env, device="cpu",
                             goal_selection_strategy=strategy, seed=0)
    bit_flipping_rollout(buffer, env, 30, seed=0, form=form)
    batch = buffer.sample(4000)
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    reached = (achieved == desired).all(axis=1)
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), reached.astype(np.float32))
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), np.where(reached, 0.0, -1.0))
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), env.compute_reward(achieved, desired, None))
    assert 100 < reached.sum() < 3900  # both cases occur


def test_without_compute_terminated_relabeled_transitions_keep_the_stored_flag():
    """Only compute_reward given (env=None): relabeled transitions keep their stored termination flag, even when
    the new goal is reached."""
    env = BitFlippingEnv(n_bits=3, max_steps=6, random_goal=True)
    buffer = HerReplayBuffer(400, env.observation_space, env.action_space, device="cpu",
                             compute_reward=env.compute_reward, goal_selection_strategy="final", seed=0)
    bit_flipping_rollout(buffer, env, 30, seed=1)
    batch = buffer.sample(4000)
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    reached = (achieved == desired).all(axis=1)
    dones = batch.dones[:, 0].numpy()
    # with "final", relabeled last transitions reach their goal; only the episodes that ended by success stored done
    assert reached.sum() > dones.sum() > 0
    assert (dones[dones == 1] == reached[dones == 1]).all()  # a stored termination was a success


def test_explicit_compute_terminated_wins_over_the_env():
    env = BitFlippingEnv(n_bits=3, max_steps=6, random_goal=True)
    never = lambda achieved_goal, desired_goal, info: np.zeros(len(achieved_goal), bool)  # noqa: E731
    buffer = HerReplayBuffer(400, env.observation_space, env.action_space, env=env, device="cpu",
                             compute_terminated=never, n_sampled_goal=1_000_000, seed=0)
    bit_flipping_rollout(buffer, env, 20, seed=2)
    batch = buffer.sample(2000)  # k/(k+1) = 1 - 1e-6: every row is relabeled
    reached = (batch.next_observations["achieved_goal"] == batch.observations["desired_goal"]).all(1)
    assert reached.sum() > 100  # the env's compute_terminated would say 1 for these
    assert batch.dones.sum() == 0
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), np.where(reached.numpy(), 0.0, -1.0))


def test_constant_compute_terminated_broadcasts():
    """gymnasium-robotics' Fetch returns a plain False for any batch."""
    env = BitFlippingEnv(n_bits=3, max_steps=6, random_goal=True)
    buffer = HerReplayBuffer(400, env.observation_space, env.action_space, env=env, device="cpu",
                             compute_terminated=lambda achieved_goal, desired_goal, info: False, seed=0)
    bit_flipping_rollout(buffer, env, 20, seed=3)
    batch = buffer.sample(500)
    assert batch.dones.shape == (500, 1)


# ---------------------------------------------------------------------------------------------------- reward == compute_reward
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), strategy=st.sampled_from(["future", "final", "episode", "random"]),
       share=st.booleans(), online=st.booleans(), n_bits=st.integers(1, 6))
def test_rewards_match_compute_reward_of_the_returned_batch_bit_flipping(seed, strategy, share, online, n_bits):
    env = BitFlippingEnv(n_bits=n_bits, random_goal=True)
    buffer = HerReplayBuffer(64, env.observation_space, env.action_space, env=env, device="cpu",
                             optimize_memory_usage=share, goal_selection_strategy=strategy, online_sampling=online,
                             max_episode_length=n_bits, seed=seed)
    bit_flipping_rollout(buffer, env, 12, seed=seed)
    batch = buffer.sample(256)
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), env.compute_reward(achieved, desired, None))
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), env.compute_terminated(achieved, desired, None))
    np.testing.assert_array_equal(batch.next_observations["desired_goal"].numpy(), desired)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), strategy=st.sampled_from(["future", "final", "episode", "random"]),
       share=st.booleans())
def test_rewards_match_compute_reward_of_the_returned_batch_point_reach(seed, strategy, share):
    env = PointReachEnv(max_episode_steps=10, distance_threshold=0.3)
    # 100 rows and 11-row episodes (shared layout): an episode starts on the last row before the first wrap
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, device="cpu",
                             optimize_memory_usage=share, goal_selection_strategy=strategy, seed=seed)
    bit_flipping_rollout(buffer, env, 16, seed=seed)  # 160 steps through a 100-row ring
    batch = buffer.sample(512)
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    rewards = batch.rewards[:, 0].numpy()
    np.testing.assert_array_equal(rewards, env.compute_reward(achieved, desired, None))
    assert (rewards == 0).any() and (rewards == -1).any()
    assert (batch.dones == 0).all()  # PointReach never terminates


# ---------------------------------------------------------------------------------------------------- info dicts
def info_reward(achieved_goal, desired_goal, info):
    """Uses the info entry "step", which must be the step of each row's transition."""
    step = np.asarray(info["step"])
    assert step.shape == (len(achieved_goal),), f"info['step'] has shape {step.shape} for {len(achieved_goal)} goals"
    assert set(info.keys()) == {"step", "scale"}, f"unexpected info keys {sorted(info.keys())}"
    if np.any(achieved_goal):  # not the construction-time probe, which passes zeros
        np.testing.assert_array_equal(step, np.asarray(achieved_goal)[:, 2] - 1, err_msg="info rows misaligned")
    return id_reward(achieved_goal, desired_goal) + 0 * np.asarray(info["scale"])[:, 0]


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("infos_form", ["list", "dict"])
def test_copy_info_dict_stores_numeric_keys_as_arrays(online, infos_form):
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(200, obs_space, action_space, device="cpu", copy_info_dict=True, n_sampled_goal=4,
                             compute_reward=info_reward, online_sampling=online, max_episode_length=5, seed=0)
    n_envs = 1
    for episode in range(6):
        for t in range(5):
            mk = lambda s, g: {"observation": np.array([[0, episode, s]], np.float32),  # noqa: E731
                               "achieved_goal": np.array([[0, episode, s]], np.float32),
                               "desired_goal": np.array([[0, episode, g]], np.float32)}
            info = {"step": t, "scale": np.array([0.5, 2.0]), "label": "not a number", "TimeLimit.truncated": t == 4,
                    "nested": {"a": 1}}
            infos = [info] if infos_form == "list" else {k: np.array([v] * n_envs) for k, v in info.items()
                                                         if k != "nested"}
            nxt = mk(t + 1, NO_GOAL)
            buffer.add(mk(t, NO_GOAL), nxt, np.zeros((1, 3), np.float32),
                       id_reward(nxt["achieved_goal"], nxt["desired_goal"]), np.array([t == 4]), infos)
    fields = buffer.storage.transition_fields if online else buffer.relabeled.transition_fields
    info_fields = sorted(k for k in fields if k.startswith("info/"))
    assert info_fields == ["info/scale", "info/step"]
    assert fields["info/scale"].shape == (2,)
    for storage in buffer._storages().values():
        for name, array in storage.arrays().items():
            assert array.dtype != object, f"{name} stores Python objects"
    batch = buffer.sample(500)  # info_reward asserts the rows it gets line up with the goals
    rewards = batch.rewards[:, 0].numpy()
    np.testing.assert_array_equal(rewards, id_reward(batch.next_observations["achieved_goal"].numpy(),
                                                     batch.observations["desired_goal"].numpy()))


def test_without_copy_info_dict_info_holds_no_entries():
    seen = []

    def reward(achieved_goal, desired_goal, info):
        seen.append(info)
        return id_reward(achieved_goal, desired_goal)

    buffer, _ = one_env_buffer("future", compute_reward=reward)
    buffer.sample(64)
    assert seen and all(not info.keys() and all(row == {} for row in info) for info in seen)


# ---------------------------------------------------------------------------------------------------- tensors, devices, envs
@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "auto"])
def test_samples_are_typed_tensors_on_the_device(device):
    if device == "auto" and torch.cuda.is_available():
        pytest.skip("auto picks CUDA here")
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(100, obs_space, action_space, device=device, compute_reward=id_reward, seed=0)
    IdWorld(buffer, [[4]], rows=100, share=False).run(9)
    batch = buffer.sample(32)
    assert type(batch).__name__ == "DictReplayBufferSamples"
    for field in ("observations", "next_observations"):
        value = getattr(batch, field)
        assert isinstance(value, dict) and set(value) == {"observation", "achieved_goal", "desired_goal"}
        for tensor in value.values():
            assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
            assert tensor.shape == (32, 3) and tensor.dtype == torch.float32
    assert batch.actions.shape == (32, 3) and batch.actions.dtype == torch.float32
    assert batch.rewards.shape == batch.dones.shape == (32, 1)
    assert batch.rewards.dtype == batch.dones.dtype == torch.float32
    assert all(t.device.type == "cpu" for t in (batch.actions, batch.rewards, batch.dones))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_samples_on_cuda():
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(100, obs_space, action_space, device="cuda", compute_reward=id_reward, seed=0)
    world = IdWorld(buffer, [[4]], rows=100, share=False)
    world.run(9)
    batch = buffer.sample(32)
    tensors = [*batch.observations.values(), *batch.next_observations.values(), batch.actions, batch.rewards, batch.dones]
    assert all(t.device.type == "cuda" for t in tensors)
    cpu = type(batch)({k: v.cpu() for k, v in batch.observations.items()}, batch.actions.cpu(),
                      {k: v.cpu() for k, v in batch.next_observations.items()}, batch.dones.cpu(), batch.rewards.cpu())
    world.check(cpu, "future")


def _spy_env(env):
    """Count calls of the innermost env's compute_reward and compute_terminated."""
    inner = env.unwrapped
    calls = {"compute_reward": 0, "compute_terminated": 0}
    depth = [0]  # BitFlippingEnv.compute_reward calls self.compute_terminated: count the outermost calls only
    for name in calls:
        original = getattr(type(inner), name)

        def spy(achieved_goal, desired_goal, info, _name=name, _original=original):
            calls[_name] += depth[0] == 0
            depth[0] += 1
            try:
                return _original(inner, achieved_goal, desired_goal, info)
            finally:
                depth[0] -= 1

        setattr(inner, name, spy)
    return calls


def _sb3_dummy_vec_env():
    vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    return vec_env.DummyVecEnv([lambda: BitFlippingEnv(n_bits=4, random_goal=True)])


@pytest.mark.parametrize("make", [
    pytest.param(lambda: BitFlippingEnv(n_bits=4, random_goal=True), id="env"),
    pytest.param(lambda: gym.make("herl/BitFlipping-v0", n_bits=4, random_goal=True), id="gym.make"),
    pytest.param(lambda: gym.vector.SyncVectorEnv([lambda: BitFlippingEnv(n_bits=4, random_goal=True)]), id="SyncVectorEnv"),
    pytest.param(_sb3_dummy_vec_env, id="DummyVecEnv"),
])
def test_env_supplies_compute_reward_and_compute_terminated(make):
    venv = make()
    inner = venv.envs[0] if hasattr(venv, "envs") else venv
    calls = _spy_env(inner)
    space = inner.observation_space
    buffer = HerReplayBuffer(200, space, inner.action_space, venv, device="cpu", seed=0)
    env = BitFlippingEnv(n_bits=4, random_goal=True)
    bit_flipping_rollout(buffer, env, 10, seed=0)
    calls.update(compute_reward=0, compute_terminated=0)
    batch = buffer.sample(300)
    assert calls == {"compute_reward": 1, "compute_terminated": 1}
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), env.compute_reward(achieved, desired, None))
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), env.compute_terminated(achieved, desired, None))


def test_explicit_compute_reward_wins_over_the_env():
    env = BitFlippingEnv(n_bits=4, random_goal=True)
    calls = _spy_env(env)
    fn = CountingReward()
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(100, obs_space, action_space, env=None, device="cpu", compute_reward=fn, seed=0)
    IdWorld(buffer, [[4]], rows=100, share=False).run(8)
    fn.calls.clear()
    buffer.sample(100)
    assert len(fn.calls) == 1 and calls["compute_reward"] == 0


def column_reward(achieved_goal, desired_goal, info):
    return id_reward(achieved_goal, desired_goal)[:, None]  # (batch, 1) is accepted too


def test_compute_reward_may_return_a_column():
    buffer, world = one_env_buffer("future", compute_reward=column_reward)
    world.check(buffer.sample(500), "future")


@pytest.mark.parametrize("infos_form", ["list", "dict"])
def test_copy_info_dict_rows_line_up_across_envs(infos_form):
    """Two envs whose info carries the env and step: compute_reward sees each relabeled row's own entries."""
    seen = []

    def reward(achieved_goal, desired_goal, info):
        if np.any(achieved_goal):
            np.testing.assert_array_equal(info["env"], achieved_goal[:, 0])
            np.testing.assert_array_equal(info["step"], achieved_goal[:, 2] - 1)
            seen.append(len(achieved_goal))
        return id_reward(achieved_goal, desired_goal)

    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(60, obs_space, action_space, device="cpu", n_envs=2, copy_info_dict=True,
                             compute_reward=reward, seed=0)
    world = IdWorld(buffer, [[3, 5], [4]], rows=30, share=False)
    original_add = buffer.add

    def add_with_infos(obs, next_obs, action, rewards, done=None, infos=None, **kwargs):
        steps = obs["observation"][:, 2]
        rows = [{"env": e, "step": int(t), "TimeLimit.truncated": bool((infos or [{}, {}])[e].get("TimeLimit.truncated"))}
                for e, t in enumerate(steps)]
        if infos_form == "dict":
            rows = {k: np.array([r[k] for r in rows]) for k in rows[0]}
        return original_add(obs, next_obs, action, rewards, done, rows, **kwargs)

    buffer.add = add_with_infos
    world.run(25)
    world.check(buffer.sample(400), "future")
    assert seen and seen[-1] > 200


def test_an_info_key_missing_later_is_a_clear_error():
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(20, obs_space, action_space, device="cpu", copy_info_dict=True,
                             compute_reward=lambda achieved_goal, desired_goal, info: id_reward(achieved_goal, desired_goal),
                             seed=0)
    o = {k: np.zeros((1, 3), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    buffer.add(o, o, np.zeros((1, 3), np.float32), np.zeros(1), np.array([False]), [{"weight": 1.0}])
    with pytest.raises(ValueError, match="info key 'weight' is missing"):
        buffer.add(o, o, np.zeros((1, 3), np.float32), np.zeros(1), np.array([False]), [{}])


def test_time_limit_of_a_made_env_sizes_offline_episodes():
    env = gym.make("herl/PointReach-v0", max_episode_steps=7)
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, device="cpu", online_sampling=False)
    assert buffer.max_episode_length == 7


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("encoding", [dict(discrete_obs_space=True), dict(image_obs_space=True), dict(continuous=True)],
                         ids=["discrete", "image", "continuous"])
def test_bit_flipping_encodings(encoding, share, online):
    """Discrete goals (stored as (1,) int64), image goals (uint8) and Box actions relabel like bit vectors."""
    env = BitFlippingEnv(n_bits=4, random_goal=True, **encoding)
    buffer = HerReplayBuffer(200, env.observation_space, env.action_space, env=env, device="cpu",
                             optimize_memory_usage=share, online_sampling=online, max_episode_length=4, seed=0)
    bit_flipping_rollout(buffer, env, 30, seed=0)
    batch = buffer.sample(300)
    achieved = batch.next_observations["achieved_goal"].numpy()
    desired = batch.observations["desired_goal"].numpy()
    assert achieved.shape[0] == 300 and achieved.dtype == (np.int64 if "discrete_obs_space" in encoding else
                                                           np.uint8 if "image_obs_space" in encoding else np.int8)
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), env.compute_reward(achieved, desired, None))
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), env.compute_terminated(achieved, desired, None))
    assert 0 < batch.dones.sum() < 300


def test_offline_random_goals_come_from_any_stored_episode():
    """20 complete episodes of 5 steps: a random goal should come from the transition's own episode about 1/20 of
    the time (online: 5 %). Offline relabeling once drew them from the staging area only, which holds little
    more than the episode that just ended, so 'random' degenerated into 'episode'."""
    obs_space, action_space = id_spaces()
    buffer = HerReplayBuffer(5000, obs_space, action_space, device="cpu", goal_selection_strategy="random",
                             compute_reward=id_reward, online_sampling=False, max_episode_length=5, seed=0)
    world = IdWorld(buffer, [[5]], rows=5000, share=False, online=False)
    world.run(100)
    batch = buffer.sample(5000)
    world.check(batch, "random")
    goals = batch.observations["desired_goal"].numpy()
    episodes = batch.observations["observation"].numpy()[:, 1]
    relabeled = goals[:, 2] != NO_GOAL
    own = (goals[relabeled, 1] == episodes[relabeled]).mean()
    assert own < 0.3, f"{own:.0%} of random goals come from the transition's own episode"
