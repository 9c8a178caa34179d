"""PointReachEnv: dynamics, sparse reward, Fetch-like episodes (truncated at 50, never terminated)."""

from __future__ import annotations

import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from herl.envs import PointReachEnv


def greedy_action(observation: dict[str, np.ndarray], max_speed: float = 0.1) -> np.ndarray:
    """Head straight for the goal at full speed (clipped per axis)."""
    return np.clip((observation["desired_goal"] - observation["achieved_goal"]) / max_speed, -1.0, 1.0)


goal_batches = st.integers(1, 6).flatmap(
    lambda batch: st.tuples(
        *[hnp.arrays(np.float32, (batch, 3), elements=st.floats(-1, 1, width=32)) for _ in range(2)]
    )
)


def test_spaces():
    env = PointReachEnv(dim=3, max_speed=0.2)
    space = env.observation_space
    assert set(space.spaces) == {"observation", "achieved_goal", "desired_goal"}
    assert space["observation"].shape == (6,)
    assert space["achieved_goal"].shape == space["desired_goal"].shape == (3,)
    assert all(space[key].dtype == np.float32 for key in space.spaces)
    np.testing.assert_allclose(space["observation"].high, [1, 1, 1, 0.2, 0.2, 0.2])
    assert env.action_space.shape == (3,) and env.action_space.dtype == np.float32


def test_reset_draws_position_and_goal_uniformly_in_the_box():
    env = PointReachEnv(dim=2)
    draws = [env.reset(seed=None if i else 0)[0] for i in range(300)]
    positions = np.array([obs["achieved_goal"] for obs in draws])
    goals = np.array([obs["desired_goal"] for obs in draws])
    for values in (positions, goals):
        assert values.min() >= -1.0 and values.max() <= 1.0
        # Uniform on [-1, 1]: mean 0 +- 0.033 and std 0.577 over 300 draws.
        np.testing.assert_allclose(values.mean(axis=0), 0.0, atol=0.15)
        np.testing.assert_allclose(values.std(axis=0), 1 / np.sqrt(3), atol=0.08)
    assert len({tuple(goal) for goal in goals}) == 300
    # The velocity half of the observation is zero after reset, the position half is the achieved goal.
    np.testing.assert_array_equal(draws[0]["observation"], np.concatenate([draws[0]["achieved_goal"], [0, 0]]))


def test_same_seed_same_episode():
    def run(seed: int) -> list[np.ndarray]:
        env = PointReachEnv()
        env.action_space.seed(seed)
        observations = [env.reset(seed=seed)[0]["observation"]]
        observations += [env.step(env.action_space.sample())[0]["observation"] for _ in range(20)]
        return observations

    np.testing.assert_array_equal(run(seed=3), run(seed=3))
    assert not np.array_equal(run(seed=3)[0], run(seed=4)[0])


def test_step_moves_by_max_speed_times_action():
    env = PointReachEnv(dim=2, max_speed=0.1)
    env.reset(seed=0)
    env.position = np.array([0.0, 0.5], np.float32)
    observation, *_ = env.step(np.array([0.5, -1.0], np.float32))
    np.testing.assert_allclose(observation["achieved_goal"], [0.05, 0.4], rtol=1e-6)
    np.testing.assert_allclose(observation["observation"], [0.05, 0.4, 0.05, -0.1], rtol=1e-6)


def test_actions_are_clipped_and_the_position_stays_in_the_box():
    env = PointReachEnv(dim=2, max_speed=0.1)
    env.reset(seed=0)
    env.position = np.array([0.95, 0.0], np.float32)
    observation, *_ = env.step(np.array([10.0, -10.0]))  # an out-of-range action moves at most max_speed
    np.testing.assert_allclose(observation["achieved_goal"], [1.0, -0.1], rtol=1e-6)
    np.testing.assert_allclose(observation["observation"][2:], [0.05, -0.1], rtol=1e-5)  # velocity: actual motion
    observation, *_ = env.step(np.array([1.0, 0.0]))
    np.testing.assert_allclose(observation["observation"], [1.0, -0.1, 0.0, 0.0], rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(actions=hnp.arrays(np.float64, (60, 2), elements=st.floats(-3, 3)), seed=st.integers(0, 2**16))
def test_every_observation_is_in_the_observation_space(actions, seed):
    env = PointReachEnv(dim=2)
    observation, _ = env.reset(seed=seed)
    assert env.observation_space.contains(observation)
    for action in actions:
        observation, *_ = env.step(action)
        assert env.observation_space.contains(observation), observation


def test_success_gives_reward_zero_but_does_not_end_the_episode():
    env = PointReachEnv()
    observation, _ = env.reset(seed=1)
    flags = []
    for _ in range(50):
        observation, reward, terminated, truncated, info = env.step(greedy_action(observation))
        assert reward == (0.0 if info["is_success"] else -1.0)
        assert isinstance(reward, float) and terminated is False
        flags.append((info["is_success"], truncated))
    # The greedy controller gets there and stays; the episode runs on to the step limit regardless.
    assert flags[-1] == (True, True)
    assert sum(success for success, _ in flags) > 10
    assert [truncated for _, truncated in flags] == [False] * 49 + [True]


def test_reward_boundary_is_inclusive():
    env = PointReachEnv(distance_threshold=0.25)
    goal = np.zeros(2, np.float32)
    inside = np.array([0.25, 0.0], np.float32)  # exactly at the threshold
    outside = np.array([0.2500001, 0.0], np.float32)
    assert env.compute_reward(achieved_goal=inside, desired_goal=goal, info={}) == 0.0
    assert env.compute_reward(achieved_goal=outside, desired_goal=goal, info={}) == -1.0


def test_direct_env_truncates_itself_exactly_once_at_max_episode_steps():
    env = PointReachEnv(max_episode_steps=7)
    env.reset(seed=0)
    truncations = [env.step(env.action_space.sample())[3] for _ in range(7)]
    assert truncations == [False] * 6 + [True]
    assert PointReachEnv().max_episode_steps == 50


def test_gym_make_episode_is_50_steps_and_the_limit_can_be_changed():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("herl/PointReach-v0")
        assert env.spec.max_episode_steps == 50
        env.reset(seed=0)
        flags = [env.step(env.action_space.sample())[2:4] for _ in range(50)]
        assert flags == [(False, False)] * 49 + [(False, True)]

        # gymnasium keeps max_episode_steps for its TimeLimit; the env's own limit is off, so this governs.
        longer = gym.make("herl/PointReach-v0", max_episode_steps=80, dim=3)
        assert longer.observation_space["desired_goal"].shape == (3,)
        longer.reset(seed=0)
        truncations = [longer.step(longer.action_space.sample())[3] for _ in range(80)]
        assert truncations == [False] * 79 + [True]


def test_compute_reward_parameter_names():
    assert list(inspect.signature(PointReachEnv.compute_reward).parameters) == [
        "self",
        "achieved_goal",
        "desired_goal",
        "info",
    ]
    with pytest.raises(TypeError):
        PointReachEnv().compute_reward(achieved_goal=np.zeros(2), goal=np.zeros(2), info={})


def test_compute_reward_agrees_with_step_to_the_bit():
    env = PointReachEnv(distance_threshold=0.3)  # large, so both rewards occur
    observation, _ = env.reset(seed=2)
    env.action_space.seed(2)
    rewards = set()
    for step in range(300):
        action = greedy_action(observation) if step % 3 else env.action_space.sample()
        observation, reward, terminated, truncated, info = env.step(action)
        recomputed = env.compute_reward(
            achieved_goal=observation["achieved_goal"], desired_goal=observation["desired_goal"], info=info
        )
        assert recomputed.shape == () and recomputed.dtype == np.float32 and recomputed == reward
        rewards.add(reward)
        if truncated:
            observation, _ = env.reset()
    assert rewards == {0.0, -1.0}


@settings(max_examples=50, deadline=None)
@given(goals=goal_batches, threshold=st.floats(0.0, 2.0))
# a distance equal to the threshold in float32, not in float64: NumPy 1 gave the batch 0 and the item -1
@example(goals=(np.zeros((1, 3), np.float32), np.array([[0.49984086, 0, 0]], np.float32)), threshold=0.49984084333182477)
def test_compute_reward_batch_equals_per_item(goals, threshold):
    achieved, desired = goals
    env = PointReachEnv(dim=3, distance_threshold=threshold)
    batch = env.compute_reward(achieved_goal=achieved, desired_goal=desired, info={})
    per_item = [env.compute_reward(achieved_goal=a, desired_goal=d, info={}) for a, d in zip(achieved, desired)]
    assert batch.shape == (len(achieved),) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, per_item)
    expected = np.where(np.linalg.norm(achieved - desired, axis=-1) <= threshold, 0.0, -1.0)
    distances = np.linalg.norm(achieved.astype(np.float64) - desired, axis=-1)
    clear = np.abs(distances - threshold) > 1e-5  # float32 rounding may decide the items on the boundary
    np.testing.assert_array_equal(batch[clear], expected[clear])
    terminated = env.compute_terminated(achieved_goal=achieved, desired_goal=desired, info={})
    assert terminated.shape == batch.shape and not terminated.any()


def test_step_before_reset_and_invalid_arguments():
    with pytest.raises(RuntimeError, match="reset"):
        PointReachEnv().step(np.zeros(2))
    for bad in ({"dim": 0}, {"max_speed": 0.0}, {"distance_threshold": -1.0}, {"max_episode_steps": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PointReachEnv(**bad)


def test_render_modes(capsys):
    env = PointReachEnv(render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    assert (frame[..., 0] == 255).any() and (frame[..., 1] == 255).any()  # the point and the goal are drawn

    human = PointReachEnv(render_mode="human")
    human.reset(seed=0)
    human.step(np.zeros(2))
    assert capsys.readouterr().out.count("position") == 2
