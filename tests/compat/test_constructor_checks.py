"""The buffers' own constructors and the peers' adapters check their counts by herl's rules (a ConfigError naming the
argument as the user wrote it, never ``int(nan)``'s "cannot convert float NaN to integer"), name a missing
observation key, and say what SB2's ``predict`` expected instead of a reshape error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import herl
from herl import HerReplayBuffer, ReplayBuffer
from herl.compat.cpprb import HindsightReplayBuffer
from herl.compat.rllte import HerReplayStorage
from herl.compat.sb2 import HER, HERGoalEnvWrapper, HindsightExperienceReplayWrapper
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.errors import ConfigError

BAD_COUNTS = [float("nan"), float("inf"), None, 2.5, "4"]


@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_buffer_constructors_check_counts_naming_the_argument(value):
    env = PointReachEnv()
    spaces = (env.observation_space, env.action_space)
    with pytest.raises(ConfigError, match=rf"^HerReplayBuffer n_sampled_goal={value!r} is not allowed: "
                                          r"n_sampled_goal must be an integer >= 0 \(0 turns relabeling off\)"):
        HerReplayBuffer(1000, *spaces, env=env, n_sampled_goal=value)
    if not isinstance(value, str):  # a str first argument gets SB3 1.x's call shape explained (a TypeError)
        with pytest.raises(ConfigError, match=rf"^HerReplayBuffer buffer_size={value!r} is not allowed"):
            HerReplayBuffer(value, *spaces, env=env)
    if value is not None:  # None: the env's time limit
        with pytest.raises(ConfigError, match=rf"^HerReplayBuffer max_episode_length={value!r} is not allowed"):
            HerReplayBuffer(1000, *spaces, env=env, max_episode_length=value)
    for name in ("buffer_size", "n_envs"):
        arguments = {"buffer_size": 100, "n_envs": 1, name: value}
        with pytest.raises(ConfigError, match=rf"^ReplayBuffer {name}={value!r} is not allowed: {name} must be an "
                                              r"integer >= 1"):
            ReplayBuffer(arguments["buffer_size"], *spaces, n_envs=arguments["n_envs"])


def test_whole_floats_still_count():
    env = PointReachEnv()
    buffer = HerReplayBuffer(1e3, env.observation_space, env.action_space, env=env, n_sampled_goal=4.0)
    assert (buffer.buffer_size, buffer.n_sampled_goal) == (1000, 4) and type(buffer.n_sampled_goal) is int


def _cpprb(**kwargs):
    env_dict = {"obs": {"shape": 2}, "act": {"shape": 2}, "next_obs": {"shape": 2}}
    return HindsightReplayBuffer(kwargs.pop("size", 100), env_dict, 10, lambda s, a, g: -np.ones(len(s)), **kwargs)


@pytest.mark.parametrize("value", [float("nan"), "x", None], ids=repr)
def test_cpprb_checks_its_counts_and_priority_settings_under_its_own_names(value):
    with pytest.raises(ConfigError, match=rf"^HindsightReplayBuffer size={value!r}"):
        _cpprb(size=value)
    with pytest.raises(ConfigError, match=rf"^HindsightReplayBuffer alpha={value!r} is not allowed"):
        _cpprb(alpha=value)
    with pytest.raises(ConfigError, match=rf"^HindsightReplayBuffer eps={value!r} is not allowed: eps must be a "
                                          r"finite number > 0"):
        _cpprb(eps=value)  # the engine's name for it is priority_eps: the user wrote eps
    with pytest.raises(ConfigError, match="HindsightReplayBuffer eps=0"):
        _cpprb(eps=0)


def test_rllte_add_names_a_missing_observation_key():
    env = PointReachEnv()
    storage = HerReplayStorage(env.observation_space, env.action_space, reward_fn=env, storage_size=1000)
    obs, _ = env.reset(seed=0)
    full = {k: torch.as_tensor(v[None]) for k, v in obs.items()}
    partial = {k: v for k, v in full.items() if k != "desired_goal"}
    zeros = torch.zeros(1)
    with pytest.raises(ValueError, match=r"observations lacks the key\(s\) \['desired_goal'\]: add\(\) takes dicts with "
                                         r"the observation space's keys"):
        storage.add(partial, torch.zeros(1, 2), zeros, zeros, zeros, {}, full)
    with pytest.raises(ValueError, match=r"next_observations lacks the key\(s\) \['desired_goal'\]"):
        storage.add(full, torch.zeros(1, 2), zeros, zeros, zeros, {}, partial)
    with pytest.raises(TypeError, match="observations must be a dict of tensors"):
        storage.add(torch.zeros(1, 4), torch.zeros(1, 2), zeros, zeros, zeros, {}, full)
    assert len(storage) == 0
    storage.add(full, torch.zeros(1, 2), zeros, zeros, zeros, {}, full)
    assert len(storage) == 1
    for name in ("num_goals", "storage_size"):
        with pytest.raises(ConfigError, match=f"HerReplayStorage {name}=nan"):
            HerReplayStorage(env.observation_space, env.action_space, reward_fn=env, **{name: float("nan")})


@pytest.mark.parametrize("value", [float("nan"), None], ids=repr)
def test_sb2_interfaces_check_their_counts(value):
    wrapped = HERGoalEnvWrapper(PointReachEnv())
    with pytest.raises(ConfigError, match=rf"^HindsightExperienceReplayWrapper n_sampled_goal={value!r}"):
        HindsightExperienceReplayWrapper(1000, value, "future", wrapped)
    with pytest.raises(ConfigError, match=rf"^HindsightExperienceReplayWrapper replay_buffer={value!r} is not allowed: "
                                          r"replay_buffer must be an integer >= 1 \(a herl ReplayBuffer, or its capacity\)"):
        HindsightExperienceReplayWrapper(value, 4, "future", wrapped)
    with pytest.raises(ConfigError, match=rf"^HER n_sampled_goal={value!r} is not allowed"):
        HER("MlpPolicy", PointReachEnv(), herl.SAC, n_sampled_goal=value)


def test_sb2_predict_says_what_it_expected():
    model = HER("MlpPolicy", BitFlippingEnv(n_bits=10), herl.DQN, seed=0)
    expected = r"a flat one of 30 numbers as HERGoalEnvWrapper makes it \(\[observation \(10\), achieved_goal \(10\), " \
               r"desired_goal \(10\)\]\), or a batch of flat ones shaped \(batch, 30\)"
    with pytest.raises(ValueError, match=expected + r"; got shape \(7,\)"):
        model.predict(np.zeros(7))
    with pytest.raises(ValueError, match=expected + r"; got shape \(3, 7\)"):
        model.predict(np.zeros((3, 7)))
    model.predict(np.zeros(30))
    model.predict(np.zeros((3, 30)))


def test_sb2_predict_loop_on_a_gymnasium_env_says_to_unpack_reset():
    """SB2's loop, ``obs = env.reset(); model.predict(obs)``: gymnasium's reset returns ``(obs, info)``."""
    model = HER("MlpPolicy", BitFlippingEnv(n_bits=10), herl.DQN, seed=0)
    unpack = r"predict got a tuple \(observation, info\), what a gymnasium env's reset\(\) returns: unpack it first, " \
             r"obs, info = env.reset\(\)"
    with pytest.raises(ValueError, match=unpack):
        model.predict(BitFlippingEnv(n_bits=10).reset(seed=0))
    with pytest.raises(ValueError, match=unpack):
        model.predict(HERGoalEnvWrapper(BitFlippingEnv(n_bits=10)).reset(seed=0))
    obs, _ = HERGoalEnvWrapper(BitFlippingEnv(n_bits=10)).reset(seed=0)
    model.predict(obs)
