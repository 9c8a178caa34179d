"""The buffer warns when the termination HER recomputes for relabeled goals cannot be right: an env that ends on
success without ``compute_terminated``, or a ``compute_terminated`` that disagrees with ``step``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from herl import DQN, HerReplayBuffer
from herl.envs import BitFlippingEnv, GoalEnvWarning

SMALL = dict(learning_starts=1_000, buffer_size=2_000, policy_kwargs=dict(net_arch=[8]), seed=0)


class NoComputeTerminated(BitFlippingEnv):
    """Ends on success, as BitFlippingEnv, but without compute_terminated (SB3's bit flipping env has none)."""

    compute_terminated = None  # not callable: HER finds none

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1).astype(np.float32)

    def compute_truncated(self, achieved_goal, desired_goal, info):
        return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)


class NeverTerminates(BitFlippingEnv):
    """A compute_terminated that says False where step ends the episode on success."""

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)


def train(env) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GoalEnvWarning)
        DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **SMALL).learn(400)
    return [str(w.message) for w in caught if issubclass(w.category, GoalEnvWarning)]


def test_an_env_that_ends_on_success_without_compute_terminated_is_told_to_give_one():
    said = train(NoComputeTerminated(n_bits=2, max_steps=4))  # random flips reach 2-bit goals often
    assert len([m for m in said if m.startswith("an episode ended with terminated=True, and there is no "
                                                "compute_terminated")]) == 1, said


def test_a_compute_terminated_that_disagrees_with_step_is_named():
    said = train(NeverTerminates(n_bits=2, max_steps=4))
    assert [m for m in said if m.startswith("compute_terminated disagrees with step on an episode's last step: step "
                                            "returned terminated=True but compute_terminated")], said


def test_an_env_whose_functions_agree_with_step_gets_no_warning():
    assert train(BitFlippingEnv(n_bits=2, max_steps=4)) == []
