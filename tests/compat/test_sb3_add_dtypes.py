"""``add`` takes every dtype Stable-Baselines3's ``add`` takes for ``done``, ``terminated``, ``truncated`` and
``reward``, in both forms, and stores the same flags for all of them (a fast path once skipped the bool
conversion of ``done``, so ``np.array([1.0])`` raised in ``done & ~truncated``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import HerReplayBuffer, ReplayBuffer

# synthetic transitions: their rewards are not what the reward function gives, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::herl.envs.checks.GoalEnvWarning")

GOAL_SPACE = spaces.Dict(
    observation=spaces.Box(-10, 10, (2,), np.float32),
    achieved_goal=spaces.Box(-10, 10, (1,), np.float32),
    desired_goal=spaces.Box(-10, 10, (1,), np.float32),
)
ACTION_SPACE = spaces.Box(-1, 1, (1,), np.float32)


def reward_fn(achieved_goal, desired_goal, info):
    return -(np.abs(achieved_goal - desired_goal)[..., 0] > 0.5).astype(np.float32)


def as_kind(values: list, kind: str):
    """``values`` (one per env) in one of the forms a user's loop may hand to ``add``."""
    if kind == "python scalar":
        return values[0]  # only for one env
    if kind == "list":
        return list(values)
    if kind.startswith("torch "):
        return torch.tensor(values, dtype=getattr(torch, kind.split()[1]))
    return np.array(values, dtype=kind)


FLAG_KINDS = ["bool", "int64", "int32", "uint8", "float32", "float64", "list", "python scalar",
              "torch bool", "torch float32", "torch int64"]
REWARD_KINDS = ["float32", "float64", "int64", "list", "python scalar", "torch float32", "torch float64", "torch int64"]


def make_buffer(kind: str, n_envs: int):
    if kind == "her":
        return HerReplayBuffer(64, GOAL_SPACE, ACTION_SPACE, device="cpu", n_envs=n_envs,
                               compute_reward=reward_fn, seed=0)
    return ReplayBuffer(64, GOAL_SPACE, ACTION_SPACE, device="cpu", n_envs=n_envs, seed=0)


def obs(n_envs: int, t: float):
    return {"observation": np.full((n_envs, 2), t, np.float32), "achieved_goal": np.full((n_envs, 1), t, np.float32),
            "desired_goal": np.zeros((n_envs, 1), np.float32)}


def stored(buffer, name: str, row: int) -> np.ndarray:
    return np.asarray(buffer.storage.transitions[name][row])


def cast(values, kind, n_envs, convert):
    return convert(values[0]) if kind == "python scalar" else as_kind(values, kind)


# a bare scalar stands for one env only
FLAG_CASES = [(kind, n_envs) for kind in FLAG_KINDS for n_envs in (1, 2) if not (kind == "python scalar" and n_envs == 2)]


@pytest.mark.parametrize("buffer_kind", ["her", "plain"])
@pytest.mark.parametrize("kind, n_envs", FLAG_CASES)
def test_done_of_every_dtype_in_sb3_form(kind, n_envs, buffer_kind):
    buffer = make_buffer(buffer_kind, n_envs)
    running = [0] * n_envs
    buffer.add(obs(n_envs, 0), obs(n_envs, 1), np.zeros((n_envs, 1)), np.zeros(n_envs), cast(running, kind, n_envs, int),
               [{} for _ in range(n_envs)])
    # env 0 ends on a time limit, the others terminate
    done = [1] * n_envs
    infos = [{"TimeLimit.truncated": i == 0} for i in range(n_envs)]
    buffer.add(obs(n_envs, 1), obs(n_envs, 2), np.zeros((n_envs, 1)), np.zeros(n_envs), cast(done, kind, n_envs, int), infos)
    np.testing.assert_array_equal(stored(buffer, "terminated", 0), np.zeros(n_envs))
    np.testing.assert_array_equal(stored(buffer, "truncated", 0), np.zeros(n_envs))
    np.testing.assert_array_equal(stored(buffer, "terminated", 1), [0.0] + [1.0] * (n_envs - 1))
    np.testing.assert_array_equal(stored(buffer, "truncated", 1), [1.0] + [0.0] * (n_envs - 1))
    assert buffer.storage.n_open == 0 and len(buffer) == 2 * n_envs  # both episodes closed
    assert buffer.sample(8).dones.shape == (8, 1)


@pytest.mark.parametrize("buffer_kind", ["her", "plain"])
@pytest.mark.parametrize("kind, n_envs", FLAG_CASES)
def test_terminated_and_truncated_of_every_dtype_in_keyword_form(kind, n_envs, buffer_kind):
    buffer = make_buffer(buffer_kind, n_envs)
    zeros = cast([0] * n_envs, kind, n_envs, bool)
    buffer.add(obs(n_envs, 0), obs(n_envs, 1), np.zeros((n_envs, 1)), np.zeros(n_envs), terminated=zeros, truncated=zeros)
    terminated = cast([0] + [1] * (n_envs - 1), kind, n_envs, int)
    truncated = cast([1] + [0] * (n_envs - 1), kind, n_envs, int)
    buffer.add(obs(n_envs, 1), obs(n_envs, 2), np.zeros((n_envs, 1)), np.zeros(n_envs),
               terminated=terminated, truncated=truncated)
    np.testing.assert_array_equal(stored(buffer, "terminated", 1), [0.0] + [1.0] * (n_envs - 1))
    np.testing.assert_array_equal(stored(buffer, "truncated", 1), [1.0] + [0.0] * (n_envs - 1))
    assert buffer.storage.n_open == 0


@pytest.mark.parametrize("buffer_kind", ["her", "plain"])
@pytest.mark.parametrize("kind", REWARD_KINDS)
def test_reward_of_every_dtype_is_stored_as_its_value(kind, buffer_kind):
    n_envs = 1 if kind == "python scalar" else 2
    buffer = make_buffer(buffer_kind, n_envs)
    rewards = [-1, 3][:n_envs]
    buffer.add(obs(n_envs, 0), obs(n_envs, 1), np.zeros((n_envs, 1)), cast(rewards, kind, n_envs, float),
               np.zeros(n_envs, bool), [{} for _ in range(n_envs)])
    buffer.add(obs(n_envs, 0), obs(n_envs, 1), np.zeros((n_envs, 1)), cast(rewards, kind, n_envs, float),
               terminated=np.zeros(n_envs), truncated=np.ones(n_envs))
    for row in (0, 1):
        np.testing.assert_array_equal(stored(buffer, "reward", row), np.array(rewards, np.float32))


def test_float_done_array_as_sb3_tests_pass_it_relabels_and_samples():
    """The exact call of the regression: SB3's tests pass ``done`` as ``np.array([1.0])``."""
    buffer = make_buffer("her", 1)
    for t in range(4):
        buffer.add(obs(1, t), obs(1, t + 1), np.zeros((1, 1)), np.array([-1.0]), np.array([float(t == 3)]), [{}])
    assert buffer.storage.n_open == 0 and len(buffer) == 4
    batch = buffer.sample(32)
    assert batch.observations["desired_goal"].shape == (32, 1)
