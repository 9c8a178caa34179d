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
