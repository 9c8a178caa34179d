"""check_goal_env: passes on working goal envs, and names the fix for each broken one."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from herl.envs import BitFlippingEnv, GoalEnvError, GoalEnvWarning, PointReachEnv, check_goal_env


def seeded(env: gym.Env, seed: int = 0) -> gym.Env:
    """Seed the env and its action space, so the checker's rollout is the same on every run."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def check_without_warnings(env: gym.Env) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_goal_env(env)


# ---------------------------------------------------------------------------------------------------------------------
# Envs that pass


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"continuous": True},
        {"discrete_obs_space": True},
        {"image_obs_space": True},
        {"image_obs_space": True, "channel_first": False},
        {"random_goal": True},
    ],
    ids=lambda kwargs: "-".join(kwargs) or "default",
)
def test_bit_flipping_passes(kwargs):
    check_without_warnings(seeded(BitFlippingEnv(n_bits=4, **kwargs)))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_point_reach_passes(dim):
    check_without_warnings(seeded(PointReachEnv(dim=dim, distance_threshold=0.5)))


@pytest.mark.parametrize("env_id", ["herl/BitFlipping-v0", "herl/PointReach-v0"])
def test_registered_envs_pass_through_gym_make_wrappers(env_id):
    check_without_warnings(seeded(gym.make(env_id)))


def test_fetch_reach_passes():
    gymnasium_robotics = pytest.importorskip("gymnasium_robotics")
    pytest.importorskip("mujoco")
    gym.register_envs(gymnasium_robotics)
    env = gym.make("FetchReach-v4")
    try:
        # Fetch names compute_reward's second parameter `goal`; the checker calls it positionally.
        check_without_warnings(seeded(env))
    finally:
        env.close()


class GoalNamedGoal(PointReachEnv):
    """gymnasium-robotics' signature: compute_reward(achieved_goal, goal, info)."""

    def compute_reward(self, achieved_goal, goal, info):  # type: ignore[override]
        return super().compute_reward(achieved_goal, goal, info)


def test_second_parameter_may_be_named_goal():
    check_without_warnings(seeded(GoalNamedGoal()))


class OverridingWrapper(gym.Wrapper):
    """Scales rewards by 2 and provides the matching compute_reward, as a wrapper changing rewards must."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, 2.0 * reward, terminated, truncated, info

    def compute_reward(self, achieved_goal, desired_goal, info):
        return 2.0 * self.env.unwrapped.compute_reward(achieved_goal, desired_goal, info)


def test_a_wrapper_compute_reward_is_found_first():
    check_without_warnings(seeded(OverridingWrapper(PointReachEnv(distance_threshold=0.5))))


# ---------------------------------------------------------------------------------------------------------------------
# Broken envs: each raises GoalEnvError naming the problem and the fix


class BoxObservationEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class MissingDesiredGoalEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {"observation": gym.spaces.Box(-1, 1, (2,)), "achieved_goal": gym.spaces.Box(-1, 1, (2,))}
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class MismatchedGoalShapesEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(-1, 1, (2,)),
            "achieved_goal": gym.spaces.Box(-1, 1, (2,)),
            "desired_goal": gym.spaces.Box(-1, 1, (3,)),
        }
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class NoComputeRewardEnv(gym.Env):
    """A PointReach-shaped env without compute_reward."""

    def __init__(self) -> None:
        self._inner = PointReachEnv()
        self.observation_space = self._inner.observation_space
        self.action_space = self._inner.action_space

    def reset(self, *, seed=None, options=None):
        return self._inner.reset(seed=seed, options=options)

    def step(self, action):
        return self._inner.step(action)


class NormWithoutAxis(PointReachEnv):
    """The classic mistake: np.linalg.norm without axis=-1 reduces a batch to one number."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal)
        return np.float32(0.0 if distance <= self.distance_threshold else -1.0)


class NormOverAxisZero(PointReachEnv):
    """Reduces over the batch axis: with 2-D goals a batch of 2 still comes back with shape (2,)."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=0)
        return (distance <= self.distance_threshold).astype(np.float32) - 1.0


class BranchOnArray(PointReachEnv):
    """Python branching on an array: fine for one pair, raises for a batch."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)
        if distance <= self.distance_threshold:
            return np.float32(0.0)
        return np.float32(-1.0)


class WrongThreshold(PointReachEnv):
    """compute_reward uses a different threshold from step."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)
        return (distance <= 10.0).astype(np.float32) - 1.0


class ReturnsRewardPerDimension(PointReachEnv):
    """Forgets to reduce over the goal axis."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -(np.abs(np.asarray(achieved_goal) - desired_goal) > self.distance_threshold).astype(np.float32)


class ReducesOverAxisOne(PointReachEnv):
    """Written for batches only: one pair of goals (as step and the checker pass it) has no axis 1."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=1)
        return (distance <= self.distance_threshold).astype(np.float32) - 1.0


class RaisesOnInfo(PointReachEnv):
    def compute_reward(self, achieved_goal, desired_goal, info):
        return info["missing_key"]


@pytest.mark.parametrize(
    ("env_factory", "match"),
    [
        (BoxObservationEnv, r"observation_space is Box, not gymnasium.spaces.Dict"),
        (MissingDesiredGoalEnv, r"lacks the key\(s\) \['desired_goal'\]"),
        (MismatchedGoalShapesEnv, r"achieved_goal has shape \(2,\) but desired_goal has shape \(3,\)"),
        (NoComputeRewardEnv, r"has no compute_reward method.*define compute_reward\(self, achieved_goal"),
        (NormWithoutAxis, r"returned shape \(\) for a batch of 2 goals.*vectorized over the leading axis.*axis=-1"),
        (NormOverAxisZero, r"on a batch of 2 goals returned .* but one pair at a time it returns .*vectorized"),
        (BranchOnArray, r"raised ValueError on a batch of 2 goals.*vectorized"),
        (WrongThreshold, r"compute_reward disagrees with step at rollout step \d+"),
        (ReturnsRewardPerDimension, r"returned shape \(2,\) for a single pair of goals"),
        (RaisesOnInfo, r"raised KeyError.*info dict"),
        (ReducesOverAxisOne, r"raised AxisError.*accept one pair of goals .*axis=-1\), not axis=1"),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_broken_envs_raise_goal_env_error(env_factory, match):
    env = env_factory()
    if not isinstance(env, (BoxObservationEnv, MissingDesiredGoalEnv, MismatchedGoalShapesEnv)):
        seeded(env)
    with pytest.raises(GoalEnvError, match=match):
        check_goal_env(env, warn=False)


def test_goal_env_error_is_a_value_error():
    assert issubclass(GoalEnvError, ValueError)


def test_a_reward_changing_wrapper_without_compute_reward_is_caught():
    env = gym.wrappers.TransformReward(PointReachEnv(), lambda reward: 2.0 * reward - 1.0)
    with pytest.raises(GoalEnvError, match="disagrees with step"):
        check_goal_env(seeded(env), warn=False)


def test_vector_envs_are_rejected():
    envs = gym.vector.SyncVectorEnv([PointReachEnv, PointReachEnv])
    with pytest.raises(GoalEnvError, match="single env"):
        check_goal_env(envs)


def test_n_steps_must_allow_a_batch():
    with pytest.raises(ValueError, match="n_steps"):
        check_goal_env(PointReachEnv(), n_steps=1)


# ---------------------------------------------------------------------------------------------------------------------
# Warnings for likely mistakes that do not stop training


class NoIsSuccess(PointReachEnv):
    def step(self, action: Any):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated, {}


class IntegerRewards(PointReachEnv):
    def compute_reward(self, achieved_goal, desired_goal, info):
        return super().compute_reward(achieved_goal, desired_goal, info).astype(np.int64)


class Float64Observations(PointReachEnv):
    def step(self, action: Any):
        observation, *rest = super().step(action)
        return {key: value.astype(np.float64) for key, value in observation.items()}, *rest


@pytest.mark.parametrize(
    ("env_factory", "match"),
    [
        (NoIsSuccess, r"no 'is_success' key"),
        (IntegerRewards, r"returned dtype int64"),
        (Float64Observations, r"outside observation_space"),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_likely_mistakes_warn_unless_warn_is_false(env_factory, match):
    with pytest.warns(GoalEnvWarning, match=match):
        check_goal_env(seeded(env_factory()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_goal_env(seeded(env_factory()), warn=False)


def test_the_outside_space_warning_names_the_entry_and_what_is_off():
    with pytest.warns(GoalEnvWarning, match=r"achieved_goal has dtype float64 where the space has float32"):
        check_goal_env(seeded(Float64Observations()))


# ---------------------------------------------------------------------------------------------------------------------
# Goal spaces and observation shapes


class GoalSpaces(PointReachEnv):
    """PointReach with its desired_goal space replaced."""

    def __init__(self, desired_goal: gym.spaces.Box) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, "desired_goal": desired_goal})


@pytest.mark.parametrize("desired_goal, match", [
    # HER stores achieved goals as desired goals, cast: it trains, but is likely a mistake
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
     r"achieved_goal's space has dtype float32 but desired_goal's has dtype float64: HER stores achieved goals as "
     r"desired goals"),
    (gym.spaces.Box(-0.5, 0.5, (2,), np.float32),
     r"achieved_goal's space has bounds \[-1.0, 1.0\] but desired_goal's has \[-0.5, 0.5\]"),
], ids=["dtypes", "bounds"])
def test_goal_spaces_of_different_dtypes_or_bounds_warn_unless_warn_is_false(desired_goal, match):
    with pytest.warns(GoalEnvWarning, match=match):
        check_goal_env(seeded(GoalSpaces(desired_goal)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_goal_env(seeded(GoalSpaces(desired_goal)), warn=False)


class AchievedGoalOfAnotherShape(PointReachEnv):
    """Returns an achieved goal of shape (3,) where its space says (2,), with step's reward from the first two."""

    def _get_obs(self) -> dict[str, np.ndarray]:
        observation = super()._get_obs()
        return {**observation, "achieved_goal": np.append(observation["achieved_goal"], np.float32(0.0))}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return super().compute_reward(np.asarray(achieved_goal)[..., :2], desired_goal, info)


def test_an_observation_entry_of_another_shape_than_its_space_is_named_before_compute_reward():
    with pytest.raises(GoalEnvError, match=r"whose achieved_goal has shape \(3,\) where the env's observation_space "
                                           r"says \(2,\)"):
        check_goal_env(seeded(AchievedGoalOfAnotherShape()), warn=False)


# ---------------------------------------------------------------------------------------------------------------------
# A reward that reads info


class ScaledReward(PointReachEnv):
    """compute_reward reads info["scale"], which step puts in its info."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)
        return -(distance > self.distance_threshold * info["scale"]).astype(np.float32)

    def step(self, action: Any):
        observation, _, terminated, truncated, info = super().step(action)
        info = {**info, "scale": 2.0}
        reward = float(self.compute_reward(observation["achieved_goal"], observation["desired_goal"], info))
        return observation, reward, terminated, truncated, info


def test_a_reward_that_reads_info_passes_with_the_info_her_stores():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_goal_env(seeded(ScaledReward()), copy_info_dict=True)


def test_a_reward_that_reads_info_is_named_with_the_fix():
    fix = (r"compute_reward reads info: .* raised KeyError: 'scale'; .*--set her.copy_info_dict=true on the command "
           r"line, replay_buffer_kwargs=dict\(copy_info_dict=True\) in Python")
    with pytest.warns(GoalEnvWarning, match=fix):
        check_goal_env(seeded(ScaledReward()))
    with pytest.raises(GoalEnvError, match=fix):
        check_goal_env(seeded(ScaledReward()), warn=False, copy_info_dict=False)


class RewardFromAStringEntry(PointReachEnv):
    """compute_reward reads info["mode"], a string HER never stores."""

    def compute_reward(self, achieved_goal, desired_goal, info):
        distance = np.linalg.norm(np.asarray(achieved_goal) - desired_goal, axis=-1)
        scale = 2.0 if info["mode"] == "wide" else 1.0
        return -(distance > self.distance_threshold * scale).astype(np.float32)

    def step(self, action: Any):
        observation, _, terminated, truncated, info = super().step(action)
        info = {**info, "mode": "wide"}
        reward = float(self.compute_reward(observation["achieved_goal"], observation["desired_goal"], info))
        return observation, reward, terminated, truncated, info


def test_a_reward_that_reads_a_non_numeric_info_entry_is_named_not_blamed_on_vectorization():
    with pytest.raises(GoalEnvError, match=r"compute_reward reads info\['mode'\], a str \('wide'\): HER stores only "
                                           r"numeric info entries") as raised:
        check_goal_env(seeded(RewardFromAStringEntry()), copy_info_dict=True)
    assert "vectorized" not in str(raised.value)


def test_the_batch_info_is_the_one_the_her_buffer_passes():
    from herl import HerReplayBuffer
    from herl.buffers.goal_functions import InfoBatch

    seen: list[Any] = []

    class Recording(ScaledReward):
        def compute_reward(self, achieved_goal, desired_goal, info):
            if np.ndim(achieved_goal) == 2:
                seen.append(info)
            return super().compute_reward(achieved_goal, desired_goal, info)

    check_goal_env(seeded(Recording()), warn=False, copy_info_dict=True)
    checked = seen[0]
    seen.clear()
    env = seeded(Recording())
    buffer = HerReplayBuffer(100, env.observation_space, env.action_space, env=env, copy_info_dict=True,
                             max_episode_length=5)
    observation, _ = env.reset(seed=0)
    for _ in range(5):
        action = env.action_space.sample()
        next_observation, reward, terminated, truncated, info = env.step(action)
        buffer.add({k: v[None] for k, v in observation.items()}, {k: v[None] for k, v in next_observation.items()},
                   action[None], np.array([reward]), np.array([terminated or truncated]), [info])
        observation = next_observation
    buffer.sample(4)
    stored = seen[-1]
    assert isinstance(checked, InfoBatch) and isinstance(stored, InfoBatch)
    assert sorted(checked.keys()) == sorted(stored.keys()) == ["is_success", "scale"]
    assert len(checked) == 2 and checked[1]["scale"] == 2.0
    assert all(checked[key].shape[1:] == stored[key].shape[1:] for key in checked.keys())


class TwoAxisGoals(PointReachEnv):
    """Goals of shape (2, 1) whose compute_reward reduces over the last axis only, as a guide for vector goals says."""

    def __init__(self) -> None:
        super().__init__()
        goal = gym.spaces.Box(-1.0, 1.0, (2, 1), np.float32)
        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, "achieved_goal": goal,
                                                  "desired_goal": goal})

    def _get_obs(self) -> dict[str, np.ndarray]:
        observation = super()._get_obs()
        return {**observation, "achieved_goal": observation["achieved_goal"].reshape(2, 1),
                "desired_goal": observation["desired_goal"].reshape(2, 1)}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -(np.linalg.norm(achieved_goal - desired_goal, axis=-1) > self.distance_threshold).astype(np.float32)

    def step(self, action: Any):
        observation, _, terminated, truncated, info = super().step(action)
        distance = np.linalg.norm(observation["achieved_goal"] - observation["desired_goal"])
        return observation, -float(distance > self.distance_threshold), terminated, truncated, info


def test_the_fix_for_goals_of_several_axes_reduces_over_all_of_them():
    """The hint said axis=-1, the very mistake that makes a (2, 1) goal's reward one value per row of the goal."""
    with pytest.raises(GoalEnvError, match=r"returned shape \(2,\) for a single pair of goals: .*e\.g\. "
                                           r"np\.linalg\.norm\(achieved_goal - desired_goal, axis=\(-2, -1\)\) "
                                           r"\(the goals have 2 axes\)"):
        check_goal_env(seeded(TwoAxisGoals()), warn=False)


class WithATimeEntry(PointReachEnv):
    """A fourth entry, 'time', declared (1,); returned as ``shape`` (None: left out)."""

    def __init__(self, shape: tuple[int, ...] | None) -> None:
        super().__init__()
        self.time_shape = shape
        self.observation_space = gym.spaces.Dict({**self.observation_space.spaces,
                                                  "time": gym.spaces.Box(0.0, 1.0, (1,), np.float32)})

    def _get_obs(self) -> dict[str, np.ndarray]:
        observation = super()._get_obs()
        if self.time_shape is None:
            return observation
        return {**observation, "time": np.zeros(self.time_shape, np.float32)}


@pytest.mark.parametrize("shape, match", [
    ((2,), r"reset returned an observation whose time has shape \(2,\) where the env's observation_space says \(1,\)"),
    (None, r"reset returned an observation without the entry 'time' that the env's observation_space declares"),
], ids=["shape", "missing"])
def test_every_declared_entry_is_checked_not_only_the_goal_keys(shape, match):
    """Only the three goal keys were checked: such an env passed and failed in training, blamed on add()'s input."""
    with pytest.raises(GoalEnvError, match=match):
        check_goal_env(seeded(WithATimeEntry(shape)), warn=False)
    check_goal_env(seeded(WithATimeEntry((1,))), warn=False)


def test_a_nested_dict_entry_is_named():
    env = WithATimeEntry((1,))
    env.observation_space = gym.spaces.Dict({**env.observation_space.spaces,
                                             "time": gym.spaces.Dict({"t": gym.spaces.Box(0.0, 1.0, (1,))})})
    with pytest.raises(GoalEnvError, match=r"observation_space's entry 'time' is a Dict space; .*give its parts "
                                           r"entries of their own"):
        check_goal_env(seeded(env), warn=False)
    from herl import SAC

    with pytest.raises(TypeError, match=r"the observation's entry 'time' is Dict\('t': .*\), unsupported"):
        SAC("MultiInputPolicy", None, observation_space=env.observation_space, action_space=env.action_space)
