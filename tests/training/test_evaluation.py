"""evaluate_policy says what a user could not see: an episode that does not end (no time limit), a success rate
that is nan because the env reports none."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import herl.training.evaluation as evaluation
from herl import SAC, evaluate_policy


class Corridor(gym.Env):
    """An episode ends after ``length`` steps, with no time limit registered; ``info`` holds no ``is_success``."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, self.t >= self.length, False, {}


def _model() -> SAC:
    return SAC("MlpPolicy", observation_space=Corridor.observation_space, action_space=Corridor.action_space,
               policy_kwargs=dict(net_arch=[4]), seed=0)


def test_a_long_episode_is_said_once_and_evaluation_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "LONG_EPISODE_STEPS", 30)
    with pytest.warns(RuntimeWarning, match="an episode has run 30 steps without ending.*TimeLimit") as record:
        rewards, lengths = evaluate_policy(_model(), Corridor(80), n_eval_episodes=2, return_episode_rewards=True)
    assert lengths == [80, 80]
    assert len([w for w in record if "without ending" in str(w.message)]) == 1 and record[0].filename == __file__


def test_a_success_rate_the_env_does_not_report_is_nan_with_a_warning() -> None:
    with pytest.warns(RuntimeWarning, match=r"no episode's last info held 'is_success': the success rate is nan"):
        _, _, success = evaluate_policy(_model(), Corridor(5), n_eval_episodes=2, return_success_rate=True)
    assert np.isnan(success)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate_policy(_model(), Corridor(5), n_eval_episodes=2)  # no success rate asked for: nothing to say
