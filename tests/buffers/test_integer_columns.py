"""NaN or infinity given for an integer column (a MultiBinary observation, a Discrete action) is refused as in a float
column: stored, it became an arbitrary integer (0, or the dtype's minimum) without a word."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from herl import HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv
from herl.errors import NonFiniteError


def _bits_buffer(**kwargs):
    env = BitFlippingEnv(n_bits=4, continuous=True)  # MultiBinary observations: int8 columns
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env, seed=0, **kwargs)
    return buffer, env.reset(seed=0)[0]


def _as_floats(obs: dict, key: str | None = None, value: float = np.nan) -> dict:
    """The observation as an env returning float arrays hands it, ``value`` in the first entry of ``key``."""
    out = {k: v.astype(np.float32) for k, v in obs.items()}
    if key is not None:
        out[key][0] = value
    return out


@pytest.mark.parametrize("storage_device", [None, "cpu"])
@pytest.mark.parametrize(("where", "key", "value"), [("next_obs", "observation", np.nan),
                                                     ("obs", "desired_goal", np.inf),
                                                     ("next_obs", "achieved_goal", -np.inf)])
def test_nan_for_a_multibinary_observation_is_refused_and_nothing_stored(storage_device, where, key, value):
    buffer, obs = _bits_buffer(storage_device=storage_device)
    bad = _as_floats(obs, key, value)
    args = (bad, _as_floats(obs)) if where == "obs" else (_as_floats(obs), bad)
    with pytest.raises(NonFiniteError, match=rf"^{where}\['{key}'\] of env 0 holds NaN or infinity; nothing of this "
                                             r"add\(\) was stored"):
        buffer.add(*args, np.zeros(4, np.float32), 0.0, terminated=False, truncated=False)
    assert len(buffer) == 0
    buffer.add(_as_floats(obs), _as_floats(obs), np.zeros(4, np.float32), 0.0, terminated=False, truncated=False)
    assert len(buffer) == 1  # finite floats for integer columns are stored as before


def test_a_nan_discrete_action_is_refused_naming_the_action():
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(4)
    buffer = ReplayBuffer(100, obs_space, act_space)
    with pytest.raises(NonFiniteError, match=r"^action of env 0 holds NaN or infinity"):
        buffer.add(np.zeros(3, np.float32), np.zeros(3, np.float32), np.array([np.nan]), 0.0, terminated=False)
    assert len(buffer) == 0
    buffer.add(np.zeros(3, np.float32), np.zeros(3, np.float32), np.array([2.0]), 0.0, terminated=False)
    assert len(buffer) == 1


def test_the_first_cause_is_named_across_float_and_integer_columns():
    """A NaN action (a float column) comes before the NaN observation the env answered (an integer column)."""
    buffer, obs = _bits_buffer()
    with pytest.raises(NonFiniteError, match=r"^action of env 0"):
        buffer.add(_as_floats(obs), _as_floats(obs, "observation"), np.full(4, np.nan, np.float32), 0.0,
                   terminated=False, truncated=False)


def test_without_the_check_the_values_are_stored_as_numpy_casts_them():
    buffer, obs = _bits_buffer(check_finite=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "invalid value encountered in cast"
        buffer.add(_as_floats(obs), _as_floats(obs, "observation"), np.zeros(4, np.float32), 0.0, terminated=False,
                   truncated=False)
    assert len(buffer) == 1
