"""BitFlippingEnv: SB3's semantics by default, the HER paper's random goals on request, and goal encodings."""

from __future__ import annotations

import importlib
import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import herl.envs
from herl.envs import BitFlippingEnv

ENCODINGS = {
    "multibinary": {},
    "discrete": {"discrete_obs_space": True},
    "image_channel_first": {"image_obs_space": True},
    "image_channel_last": {"image_obs_space": True, "channel_first": False},
}


def bit_vectors(n_bits: int) -> st.SearchStrategy[np.ndarray]:
    return st.lists(st.integers(0, 1), min_size=n_bits, max_size=n_bits).map(lambda bits: np.array(bits, np.int8))


def rollout(env: gym.Env, *, seed: int, n_steps: int) -> list[tuple]:
    """Random-action rollout, resetting at episode ends; returns (obs, reward, terminated, truncated, info) tuples."""
    env.action_space.seed(seed)
    observation, _ = env.reset(seed=seed)
    transitions = [(observation, None, None, None, None)]
    for _ in range(n_steps):
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
        transitions.append((observation, reward, terminated, truncated, info))
        if terminated or truncated:
            observation, _ = env.reset()
            transitions.append((observation, None, None, None, None))
    return transitions


# ---------------------------------------------------------------------------------------------------------------------
# Default (SB3) semantics


def test_default_goal_is_all_ones_and_initial_state_is_random():
    env = BitFlippingEnv(n_bits=8)
    starts = []
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        np.testing.assert_array_equal(observation["desired_goal"], np.ones(8))
        np.testing.assert_array_equal(observation["observation"], observation["achieved_goal"])
        starts.append(observation["observation"].copy())
        assert info == {}
    # SB3 samples the initial state; it is not all zeros (20 equal draws of 8 bits would be a 2**-152 fluke).
    assert len({tuple(start) for start in starts}) > 1


def test_matches_stable_baselines3_step_by_step():
    sb3_envs = pytest.importorskip("stable_baselines3.common.envs")
    ours = BitFlippingEnv(n_bits=6, max_steps=9)
    theirs = sb3_envs.BitFlippingEnv(n_bits=6, max_steps=9)
    rng = np.random.default_rng(0)
    for seed in range(10):
        observation, _ = ours.reset(seed=seed)
        theirs.reset(seed=seed)
        theirs.state = observation["observation"].copy()  # same start; the two envs draw it differently
        for _ in range(9):
            action = int(rng.integers(6))
            observation, reward, terminated, truncated, info = ours.step(action)
            their_obs, their_reward, their_terminated, their_truncated, their_info = theirs.step(action)
            for key in observation:
                np.testing.assert_array_equal(observation[key], their_obs[key])
            assert (reward, terminated, truncated) == (their_reward, their_terminated, their_truncated)
            assert info["is_success"] == their_info["is_success"]


def test_reaching_the_goal_gives_reward_zero_and_terminates():
    env = BitFlippingEnv(n_bits=5, max_steps=100)
    env.reset(seed=0)
    env.state[:] = [0, 1, 0, 1, 1]
    zero_bits = [0, 2]
    for index, bit in enumerate(zero_bits):
        observation, reward, terminated, truncated, info = env.step(int(bit))
        last = index == len(zero_bits) - 1
        assert reward == (0.0 if last else -1.0)
        assert isinstance(reward, float)
        assert terminated is last
        assert info["is_success"] is last
        assert truncated is False
    np.testing.assert_array_equal(observation["achieved_goal"], np.ones(5))


def test_truncates_exactly_at_max_steps_without_terminating():
    env = BitFlippingEnv(n_bits=4, max_steps=6)
    env.reset(seed=0)
    # Flipping bit 0 back and forth never changes bits 1..3; start them at 0 so the goal is never reached.
    env.state[:] = 0
    flags = [env.step(0)[2:4] for _ in range(6)]
    assert flags == [(False, False)] * 5 + [(False, True)]


def test_max_steps_defaults_to_n_bits():
    env = BitFlippingEnv(n_bits=7)
    assert env.max_steps == 7
    env.reset(seed=0)
    env.state[:] = 0
    truncations = [env.step(0)[3] for _ in range(7)]
    assert truncations == [False] * 6 + [True]


def test_success_on_the_last_step_is_both_terminated_and_truncated():
    env = BitFlippingEnv(n_bits=3, max_steps=1)
    env.reset(seed=0)
    env.state[:] = [1, 1, 0]
    _, reward, terminated, truncated, info = env.step(2)
    assert (reward, terminated, truncated, info["is_success"]) == (0.0, True, True, True)


def test_continuous_actions_flip_the_bits_with_positive_components():
    env = BitFlippingEnv(n_bits=5, continuous=True)
    assert isinstance(env.action_space, gym.spaces.Box)
    assert env.action_space.shape == (5,)
    observation, _ = env.reset(seed=1)
    before = observation["observation"].copy()
    action = np.array([0.5, -0.5, 0.0, 1.0, -1.0], dtype=np.float32)  # exactly 0 does not flip
    observation, *_ = env.step(action)
    np.testing.assert_array_equal(observation["observation"], before ^ np.array([1, 0, 0, 1, 0], np.int8))


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        BitFlippingEnv(n_bits=3).step(0)


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="cannot both"):
        BitFlippingEnv(n_bits=3, discrete_obs_space=True, image_obs_space=True)
    with pytest.raises(ValueError, match="at most 62"):
        BitFlippingEnv(n_bits=63, discrete_obs_space=True)
    with pytest.raises(ValueError, match="n_bits"):
        BitFlippingEnv(n_bits=0)
    with pytest.raises(ValueError, match="render_mode"):
        BitFlippingEnv(n_bits=3, render_mode="ansi")


def test_observations_do_not_alias_the_state():
    env = BitFlippingEnv(n_bits=4)
    observation, _ = env.reset(seed=0)
    saved = {key: value.copy() for key, value in observation.items()}
    env.step(0)
    for key in observation:
        np.testing.assert_array_equal(observation[key], saved[key])


# ---------------------------------------------------------------------------------------------------------------------
# Random goals (the HER paper's version) and seeding


def test_random_goal_redraws_the_goal_at_every_reset():
    env = BitFlippingEnv(n_bits=10, random_goal=True)
    goals = np.array([env.reset(seed=None if i else 0)[0]["desired_goal"] for i in range(400)])
    assert len({tuple(goal) for goal in goals}) > 300  # 400 draws from 1024 goals: ~330 distinct expected
    # Uniform bits: each bit's mean over 400 draws is 0.5 +- 0.025 (std), so within 0.15 is ~6 sigma.
    np.testing.assert_allclose(goals.mean(axis=0), 0.5, atol=0.15)


def test_random_goal_episode_reaches_its_own_goal():
    env = BitFlippingEnv(n_bits=6, random_goal=True)
    observation, _ = env.reset(seed=5)
    differing = np.flatnonzero(observation["achieved_goal"] != observation["desired_goal"])
    for bit in differing:
        _, reward, terminated, _, info = env.step(int(bit))
    assert len(differing) > 0 and (reward, terminated, info["is_success"]) == (0.0, True, True)


@pytest.mark.parametrize("random_goal", [False, True])
@pytest.mark.parametrize("continuous", [False, True])
def test_same_seed_same_episodes(random_goal, continuous):
    def run(seed: int) -> list:
        env = BitFlippingEnv(n_bits=8, continuous=continuous, random_goal=random_goal)
        return [
            (tuple(np.ravel(obs["observation"])), tuple(np.ravel(obs["desired_goal"])), reward)
            for obs, reward, *_ in rollout(env, seed=seed, n_steps=40)
        ]

    assert run(seed=7) == run(seed=7)
    assert run(seed=7) != run(seed=8)


# ---------------------------------------------------------------------------------------------------------------------
# Encodings and spaces


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("random_goal", [False, True])
def test_every_observation_is_in_the_observation_space(encoding, random_goal):
    env = BitFlippingEnv(n_bits=6, random_goal=random_goal, **ENCODINGS[encoding])
    for observation, *_ in rollout(env, seed=0, n_steps=60):
        assert env.observation_space.contains(observation), observation
        for key, value in observation.items():
            assert env.observation_space[key].contains(value), key


def test_encoding_spaces_and_dtypes():
    assert BitFlippingEnv(n_bits=5).observation_space["observation"] == gym.spaces.MultiBinary(5)
    assert BitFlippingEnv(n_bits=5).reset(seed=0)[0]["observation"].dtype == np.int8
    assert BitFlippingEnv(n_bits=5, discrete_obs_space=True).observation_space["desired_goal"] == gym.spaces.Discrete(32)
    image_first = BitFlippingEnv(n_bits=5, image_obs_space=True).observation_space["achieved_goal"]
    image_last = BitFlippingEnv(n_bits=5, image_obs_space=True, channel_first=False).observation_space["achieved_goal"]
    assert (image_first.shape, image_first.dtype) == ((1, 36, 36), np.uint8)
    assert (image_last.shape, image_last.dtype) == ((36, 36, 1), np.uint8)


@settings(max_examples=50, deadline=None)
@given(bits=bit_vectors(9), encoding=st.sampled_from(sorted(ENCODINGS)))
def test_encodings_round_trip(bits, encoding):
    env = BitFlippingEnv(n_bits=9, **ENCODINGS[encoding])
    encoded = env.encode(bits)
    assert env.observation_space["achieved_goal"].contains(encoded)
    np.testing.assert_array_equal(env.decode(encoded), bits)


def test_encodings_match_sb3_conventions():
    bits = np.array([1, 0, 1, 1], np.int8)
    # Bit i has weight 2**i.
    assert BitFlippingEnv(n_bits=4, discrete_obs_space=True).encode(bits) == 1 + 4 + 8
    image = BitFlippingEnv(n_bits=4, image_obs_space=True).encode(bits)
    np.testing.assert_array_equal(image.ravel()[:5], [255, 0, 255, 255, 0])
    assert image.ravel()[4:].sum() == 0


# ---------------------------------------------------------------------------------------------------------------------
# compute_reward / compute_terminated


def test_compute_reward_parameter_names():
    # HER calls compute_reward(achieved_goal=..., desired_goal=..., info=...): the names are the interface.
    for method in (BitFlippingEnv.compute_reward, BitFlippingEnv.compute_terminated):
        assert list(inspect.signature(method).parameters) == ["self", "achieved_goal", "desired_goal", "info"]
    env = BitFlippingEnv(n_bits=3)
    with pytest.raises(TypeError):
        env.compute_reward(achieved_goal=np.ones(3), goal=np.ones(3), info={})


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_compute_reward_agrees_with_step(encoding):
    env = BitFlippingEnv(n_bits=3, **ENCODINGS[encoding])  # few bits, so successes happen
    transitions = [t for t in rollout(env, seed=0, n_steps=200) if t[1] is not None]
    assert any(reward == 0.0 for _, reward, *_ in transitions)
    for observation, reward, terminated, _, info in transitions:
        by_keyword = env.compute_reward(
            achieved_goal=observation["achieved_goal"], desired_goal=observation["desired_goal"], info=info
        )
        assert by_keyword.shape == () and by_keyword.dtype == np.float32
        assert by_keyword == reward
        done = env.compute_terminated(
            achieved_goal=observation["achieved_goal"], desired_goal=observation["desired_goal"], info=info
        )
        assert done.dtype == np.bool_ and bool(done) == terminated


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(st.tuples(bit_vectors(5), bit_vectors(5)), min_size=1, max_size=8),
    encoding=st.sampled_from(sorted(ENCODINGS)),
)
def test_compute_reward_batch_equals_per_item(pairs, encoding):
    env = BitFlippingEnv(n_bits=5, **ENCODINGS[encoding])
    achieved = [env.encode(a) for a, _ in pairs]
    desired = [env.encode(d) for _, d in pairs]
    batch = env.compute_reward(achieved_goal=np.stack(achieved), desired_goal=np.stack(desired), info={})
    per_item = [env.compute_reward(achieved_goal=a, desired_goal=d, info={}) for a, d in zip(achieved, desired)]
    expected = [0.0 if np.array_equal(a, d) else -1.0 for a, d in pairs]
    assert batch.shape == (len(pairs),) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, per_item)
    np.testing.assert_array_equal(batch, expected)
    terminated = env.compute_terminated(achieved_goal=np.stack(achieved), desired_goal=np.stack(desired), info={})
    np.testing.assert_array_equal(terminated, np.array(expected) == 0.0)


def test_compute_reward_accepts_buffer_layouts():
    # Replay buffers store Discrete values as (B, 1) and bit vectors as floats.
    discrete = BitFlippingEnv(n_bits=4, discrete_obs_space=True)
    rewards = discrete.compute_reward(achieved_goal=np.array([[15], [3]]), desired_goal=np.array([[15], [15]]), info={})
    np.testing.assert_array_equal(rewards, [0.0, -1.0])
    binary = BitFlippingEnv(n_bits=3)
    rewards = binary.compute_reward(
        achieved_goal=np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]], np.float32), desired_goal=np.ones((2, 3)), info={}
    )
    np.testing.assert_array_equal(rewards, [0.0, -1.0])
    assert not np.signbit(rewards[0])  # 0.0, not -0.0


def test_compute_reward_rejects_wrong_goal_width():
    with pytest.raises(ValueError, match="n_bits=4"):
        BitFlippingEnv(n_bits=4).compute_reward(achieved_goal=np.ones(3), desired_goal=np.ones(3), info={})


# ---------------------------------------------------------------------------------------------------------------------
# Registration and rendering


def test_gym_make_passes_kwargs_and_adds_no_time_limit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("herl/BitFlipping-v0", n_bits=15, continuous=True)
        assert env.observation_space["observation"].shape == (15,)
        assert isinstance(env.action_space, gym.spaces.Box)
        assert env.spec.max_episode_steps is None
        wrapper = env
        while isinstance(wrapper, gym.Wrapper):
            assert not isinstance(wrapper, gym.wrappers.TimeLimit)
            wrapper = wrapper.env
        env.reset(seed=0)
        env.unwrapped.state[:] = 0
        # Flipping only bit 0 from all zeros never reaches the all-ones goal: truncation comes from max_steps = 15.
        truncations = [env.step(np.eye(15, dtype=np.float32)[0])[3] for _ in range(15)]
    assert truncations == [False] * 14 + [True]


def test_registration_is_idempotent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(herl.envs)
        importlib.import_module("herl.envs")
    assert "herl/BitFlipping-v0" in gym.envs.registry


def test_render_modes(capsys):
    image = BitFlippingEnv(n_bits=4, render_mode="rgb_array")
    image.reset(seed=0)
    frame = image.render()
    assert frame.dtype == np.uint8 and frame.shape == (16, 32, 3)
    np.testing.assert_array_equal(frame[8:, :, :], 255)  # bottom row: the all-ones goal
    np.testing.assert_array_equal(frame[0, ::8, 0] // 255, image.state)

    human = BitFlippingEnv(n_bits=4, render_mode="human")
    human.reset(seed=0)
    assert human.render() is None
    assert "state" in capsys.readouterr().out
    assert BitFlippingEnv(n_bits=4).render() is None
