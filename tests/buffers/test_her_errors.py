"""Clear errors that name the fix: spaces, reward functions, strategies, add() shapes."""

from __future__ import annotations

import enum

import numpy as np
import pytest
from gymnasium import spaces

from her_world import id_reward, id_spaces
from herl import GoalSelectionStrategy as PublicStrategy
from herl import HerReplayBuffer as PublicHer
from herl.buffers import KEY_TO_GOAL_STRATEGY, GoalSelectionStrategy, HerReplayBuffer
from herl.envs import BitFlippingEnv


def make(**kwargs):
    obs_space, action_space = id_spaces()
    kwargs.setdefault("compute_reward", id_reward)
    return HerReplayBuffer(20, kwargs.pop("obs_space", obs_space), action_space, device="cpu", **kwargs)


def test_public_names():
    assert PublicHer is HerReplayBuffer and PublicStrategy is GoalSelectionStrategy
    assert KEY_TO_GOAL_STRATEGY == {"future": GoalSelectionStrategy.FUTURE, "final": GoalSelectionStrategy.FINAL,
                                    "episode": GoalSelectionStrategy.EPISODE, "random": GoalSelectionStrategy.RANDOM}


# ---------------------------------------------------------------------------------------------------- spaces
def test_observation_space_must_be_a_dict():
    with pytest.raises(ValueError, match="Dict observation space") as info:
        make(obs_space=spaces.Box(-1, 1, (3,), np.float32))
    assert "ReplayBuffer" in str(info.value)  # the alternative for non-goal envs


@pytest.mark.parametrize("missing", ["observation", "achieved_goal", "desired_goal"])
def test_observation_space_needs_the_three_keys(missing):
    obs_space, _ = id_spaces()
    partial = spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != missing})
    with pytest.raises(ValueError, match=missing):
        make(obs_space=partial)


def test_goal_shapes_must_match():
    box = lambda n: spaces.Box(-1, 1, (n,), np.float32)  # noqa: E731
    with pytest.raises(ValueError, match="achieved_goal has shape"):
        make(obs_space=spaces.Dict({"observation": box(3), "achieved_goal": box(3), "desired_goal": box(2)}))


# ---------------------------------------------------------------------------------------------------- reward functions
def scalar_reward(achieved_goal, desired_goal, info):
    return float(-np.linalg.norm(achieved_goal - desired_goal))  # one number for the whole batch


def per_goal_reward(achieved_goal, desired_goal, info):
    return 0.0 if float(achieved_goal[0]) == float(desired_goal[0]) else -1.0  # fails on a batch


@pytest.mark.parametrize("fn", [scalar_reward, per_goal_reward, lambda achieved_goal, desired_goal, info: np.zeros((2, 3))])
def test_non_vectorized_compute_reward_is_caught_at_construction(fn):
    with pytest.raises(ValueError, match="vectorized") as info:
        make(compute_reward=fn)
    assert "compute_reward" in str(info.value)


def test_non_vectorized_compute_terminated_is_caught_at_construction():
    with pytest.raises(ValueError, match="compute_terminated must be vectorized"):
        make(compute_terminated=lambda achieved_goal, desired_goal, info: np.zeros(5, bool))


def test_non_vectorized_env_reward_is_caught():
    class ScalarEnv(BitFlippingEnv):
        def compute_reward(self, achieved_goal, desired_goal, info):
            return float(np.all(achieved_goal == desired_goal)) - 1.0

    env = ScalarEnv(n_bits=3)
    with pytest.raises(ValueError, match="vectorized"):
        HerReplayBuffer(20, env.observation_space, env.action_space, env=env, device="cpu")


def test_non_vectorized_reward_with_copy_info_dict_is_caught_at_the_first_add():
    """With copy_info_dict the info entries are known at the first add, so the probe happens there."""
    buffer = make(compute_reward=scalar_reward, copy_info_dict=True)
    o = {k: np.zeros((1, 3), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    with pytest.raises(ValueError, match="vectorized"):
        buffer.add(o, o, np.zeros((1, 3), np.float32), np.zeros(1), np.array([False]), [{"x": 1.0}])


@pytest.mark.parametrize("copy_info_dict, info", [(False, {"scale": 2.0}), (True, {"scale": "wide"})],
                         ids=["not-stored", "not-numeric"])
def test_a_reward_reading_an_info_entry_the_buffer_does_not_hold_is_named_with_the_fix(copy_info_dict, info):
    """Without copy_info_dict no entry is held; with it, a string entry is not: either way the entry is named with what
    the buffer holds, not blamed on vectorization (before, both said "must be vectorized")."""

    def scaled(achieved_goal, desired_goal, info):
        return -(np.abs(achieved_goal - desired_goal).sum(-1) > float(info["scale"])).astype(np.float32)

    o = {k: np.zeros((1, 3), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    with pytest.raises(ValueError, match=r"compute_reward reads info\['scale'\], which HER's buffer does not hold "
                                         r"\(it holds \[\]\): with HerReplayBuffer\(copy_info_dict=True\)") as raised:
        buffer = make(compute_reward=scaled, copy_info_dict=copy_info_dict)  # a function given: probed here or at add
        buffer.add(o, o, np.zeros((1, 3), np.float32), np.zeros(1), np.array([True]), [info])
    assert "vectorized" not in str(raised.value)


def test_neither_env_nor_compute_reward():
    with pytest.raises(ValueError, match="env=.*compute_reward="):
        make(compute_reward=None)


def test_env_without_compute_reward():
    class NoReward:
        pass

    with pytest.raises(ValueError, match=r"the env given, NoReward, has no compute_reward method"):
        make(compute_reward=None, env=NoReward())


# ---------------------------------------------------------------------------------------------------- strategies and k
@pytest.mark.parametrize("name", ["future", "FINAL", "Episode", "random", GoalSelectionStrategy.FUTURE])
def test_strategies_accepted(name):
    buffer = make(goal_selection_strategy=name)
    assert isinstance(buffer.goal_selection_strategy, GoalSelectionStrategy)


def test_a_peers_strategy_enum_is_read_by_its_members_name():
    sb3 = pytest.importorskip("stable_baselines3.her.goal_selection_strategy")
    for member in sb3.GoalSelectionStrategy:  # SB3's HER docs import theirs
        assert make(goal_selection_strategy=member).goal_selection_strategy is GoalSelectionStrategy[member.name]


class Color(enum.Enum):
    RED = 0


@pytest.mark.parametrize("name", ["futur", "", 3, None, Color.RED])
def test_unknown_strategy_lists_the_valid_ones(name):
    with pytest.raises(ValueError, match="goal_selection_strategy") as info:
        make(goal_selection_strategy=name)
    for valid in KEY_TO_GOAL_STRATEGY:
        assert valid in str(info.value)


@pytest.mark.parametrize("k", [-1, -4, 1.5])
def test_n_sampled_goal_must_be_a_non_negative_integer(k):
    with pytest.raises(ValueError, match="n_sampled_goal must be an integer >= 0"):
        make(n_sampled_goal=k)


@pytest.mark.parametrize("size", [0, -3, 2.5])
def test_buffer_size_must_be_positive(size):
    obs_space, action_space = id_spaces()
    with pytest.raises(ValueError, match="buffer_size"):
        HerReplayBuffer(size, obs_space, action_space, device="cpu", compute_reward=id_reward)


def test_too_small_buffer_for_its_envs_keeps_two_rows_per_env_and_says_so():
    obs_space, action_space = id_spaces()
    with pytest.warns(UserWarning, match="buffer_size=5 with n_envs=4 is fewer than 2 transitions per env"):
        buffer = HerReplayBuffer(5, obs_space, action_space, device="cpu", n_envs=4, compute_reward=id_reward)
    assert buffer.buffer_size == 2


@pytest.mark.parametrize("size", [0, -1, 1.5])
def test_batch_size_must_be_positive(size):
    buffer = make()
    o = {k: np.zeros((1, 3), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    buffer.add(o, o, np.zeros((1, 3), np.float32), np.zeros(1), np.array([True]), [{}])
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample(size)


# ---------------------------------------------------------------------------------------------------- add()
def batch(n, **overrides):
    obs = {k: np.zeros((n, 3), np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    obs.update(overrides)
    return obs


def add(buffer, obs=None, next_obs=None, action=None, reward=None, done=None, infos=None, n=2, **kwargs):
    buffer.add(batch(n) if obs is None else obs, batch(n) if next_obs is None else next_obs,
               np.zeros((n, 3), np.float32) if action is None else action,
               np.zeros(n) if reward is None else reward,
               np.zeros(n, bool) if done is None and "terminated" not in kwargs else done,
               [{}] * n if infos is None else infos, **kwargs)


def test_add_checks_the_env_axis():
    buffer = make(n_envs=2)
    with pytest.raises(ValueError, match="n_envs") as info:
        add(buffer, obs=batch(3))
    assert "obs" in str(info.value) and "(3, 3)" in str(info.value) and "(2, 3)" in str(info.value)
    with pytest.raises(ValueError, match="n_envs"):
        add(buffer, next_obs=batch(1))
    with pytest.raises(ValueError, match="action.*n_envs"):
        add(buffer, action=np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="reward.*n_envs"):
        add(buffer, reward=np.zeros(3))
    with pytest.raises(ValueError, match="done.*n_envs"):
        add(buffer, done=np.zeros(3, bool))
    with pytest.raises(ValueError, match="infos has 3 entries"):
        add(buffer, done=np.ones(2, bool), infos=[{}] * 3)


def test_add_checks_the_keys_and_shapes():
    buffer = make(n_envs=2)
    obs = batch(2)
    del obs["desired_goal"]
    with pytest.raises(ValueError, match="lacks the key 'desired_goal'"):
        add(buffer, obs=obs)
    with pytest.raises(ValueError, match=r"achieved_goal.*\(2, 4\)"):
        add(buffer, next_obs=batch(2, achieved_goal=np.zeros((2, 4), np.float32)))
    with pytest.raises(ValueError, match="must be a dict"):
        add(buffer, obs=np.zeros((2, 3), np.float32))


def test_add_needs_done_or_terminated_but_not_both():
    buffer = make(n_envs=2)
    o = batch(2)
    with pytest.raises(ValueError, match="done"):
        buffer.add(o, o, np.zeros((2, 3), np.float32), np.zeros(2))
    with pytest.raises(ValueError, match="not both"):
        buffer.add(o, o, np.zeros((2, 3), np.float32), np.zeros(2), np.zeros(2, bool), terminated=np.zeros(2, bool))


def test_a_failed_add_stores_nothing():
    """A rejected add must leave the buffer as it was (no half-written transition)."""
    from her_world import assert_same_arrays, snapshot

    buffer = make(n_envs=2)
    add(buffer)
    before = snapshot(buffer)
    for bad in (dict(obs=batch(3)), dict(action=np.zeros((3, 3))), dict(reward=np.zeros(5))):
        with pytest.raises(ValueError):
            add(buffer, **bad)
    assert_same_arrays(before, snapshot(buffer))
    assert len(buffer) == 2


def test_one_env_may_leave_out_the_env_axis():
    buffer = make()
    o = {k: np.zeros(3, np.float32) for k in ("observation", "achieved_goal", "desired_goal")}
    buffer.add(o, o, np.zeros(3, np.float32), 0.0, True, [{}])
    assert len(buffer) == 1


def test_a_compute_reward_the_user_gives_is_checked_at_construction_beside_an_env():
    """An env's own goal functions may need a reset first, so their failed calls wait for first use; a function the
    user passes is the user's to fix now, env or not (here: NumPy refuses `-` on booleans)."""
    from herl.envs import PointReachEnv

    env = PointReachEnv()
    broken = lambda a, d, i: -(np.linalg.norm(a - d, axis=-1) > 0.05)  # noqa: E731
    for kwargs in ({}, {"env": env}):
        with pytest.raises(ValueError, match="compute_reward failed on a batch of 2 goals .*must be vectorized"):
            HerReplayBuffer(100, env.observation_space, env.action_space, compute_reward=broken, **kwargs)
    fixed = lambda a, d, i: -(np.linalg.norm(a - d, axis=-1) > 0.05).astype(np.float32)  # noqa: E731
    HerReplayBuffer(100, env.observation_space, env.action_space, env=env, compute_reward=fixed)


def test_replay_buffer_class_takes_herls_classes_and_names_the_fix_for_anything_else():
    """A buffer object (an SB3 mix-up: its length 0 made it read as 'no class', and HER was silently off), a class's
    name, another library's class: each refused, saying what to pass."""
    from herl import SAC
    from herl.errors import ConfigError
    from herl.envs import PointReachEnv

    env = PointReachEnv()
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env)
    with pytest.raises(ConfigError, match=r"the class, replay_buffer_class=HerReplayBuffer, with the object's settings"):
        SAC("MultiInputPolicy", env, replay_buffer_class=buffer)
    with pytest.raises(ConfigError, match=r"from herl import HerReplayBuffer.*not its name"):
        SAC("MultiInputPolicy", env, replay_buffer_class="HerReplayBuffer")
    sb3 = pytest.importorskip("stable_baselines3")
    with pytest.raises(ConfigError, match=r"from herl import ReplayBuffer.*not another library's"):
        SAC("MultiInputPolicy", env, replay_buffer_class=sb3.common.buffers.DictReplayBuffer)
    assert SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer).replay_buffer_class is HerReplayBuffer
    assert SAC("MultiInputPolicy", env).replay_buffer_class.__name__ == "ReplayBuffer"
