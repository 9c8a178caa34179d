"""TimeFeature: the share of the time limit left, appended to the observation; ``env.time_feature=true`` on runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from herl.cli import main
from herl.envs import ActionRepeat, PointReachEnv, TimeFeature
from herl.run.envs import ReplayableEnv, make_env
from herl.run.errors import CLIError


class Counter(gym.Env):
    """A flat env whose observation is its step count."""

    observation_space = gym.spaces.Box(0, 1000, (2,), np.float64)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.t += 1
        return np.full(2, float(self.t)), 0.0, False, False, {}


def test_a_flat_observation_gets_the_share_of_the_limit_left():
    env = TimeFeature(gym.wrappers.TimeLimit(Counter(), max_episode_steps=4), max_steps=4)
    assert env.observation_space.shape == (3,) and env.observation_space.dtype == np.float64
    assert env.observation_space.low[-1] == 0.0 and env.observation_space.high[-1] == 1.0
    obs, _ = env.reset(seed=0)
    seen = [obs[-1]]
    for _ in range(4):
        obs, _, _, truncated, _ = env.step(np.zeros(1, np.float32))
        seen.append(obs[-1])
        np.testing.assert_array_equal(obs[:2], np.full(2, float(env.unwrapped.t)))  # the env's part unchanged
    assert seen == [1.0, 0.75, 0.5, 0.25, 0.0] and truncated
    assert env.reset()[0][-1] == 1.0  # a new episode starts over
    assert env.observation_space.contains(obs)


def test_a_goal_env_gets_it_in_its_observation_entry_and_keeps_its_goals():
    inner = gym.wrappers.TimeLimit(PointReachEnv(max_episode_steps=None), max_episode_steps=50)
    env = TimeFeature(inner, max_steps=50)
    assert env.observation_space["observation"].shape == (inner.observation_space["observation"].shape[0] + 1,)
    assert env.observation_space["desired_goal"] == inner.observation_space["desired_goal"]
    obs, _ = env.reset(seed=2)
    for t in range(1, 6):
        obs, reward, _, _, info = env.step(env.action_space.sample())
        assert obs["observation"][-1] == pytest.approx(1 - t / 50)
        assert reward == env.unwrapped.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)
        assert env.observation_space.contains(obs)


def test_the_limit_defaults_to_the_registered_one_and_counts_env_steps_under_action_repeat():
    env = make_env("herl/PointReach-v0", {"time_feature": True, "action_repeat": 3, "max_episode_steps": 10})
    assert isinstance(env, ActionRepeat) and isinstance(env.env, TimeFeature) and env.env.max_steps == 10
    obs, _ = env.reset(seed=0)
    seen = [obs["observation"][-1]]
    while True:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        seen.append(obs["observation"][-1])
        if terminated or truncated:
            break
    np.testing.assert_allclose(seen, [1.0, 0.7, 0.4, 0.1, 0.0], atol=1e-6)  # 3 + 3 + 3 + 1 env steps


def test_a_replayable_env_restores_the_clock():
    env = ReplayableEnv(make_env("herl/PointReach-v0", {"time_feature": True}))
    env.reset(seed=1)
    for action in np.linspace(-1, 1, 14, dtype=np.float32).reshape(7, 2):
        obs = env.step(action)[0]
    restored = ReplayableEnv(make_env("herl/PointReach-v0", {"time_feature": True})).restore(*env.snapshot())
    for key in obs:
        np.testing.assert_array_equal(restored[key], obs[key])
    assert restored["observation"][-1] == pytest.approx(1 - 7 / 50)


def test_bad_settings_are_named():
    with pytest.raises(CLIError, match="env.time_feature must be true or false"):
        make_env("herl/PointReach-v0", {"time_feature": 1})
    with pytest.raises(CLIError, match="needs the episode's time limit.*env.max_episode_steps"):
        make_env("herl/BitFlipping-v0", {"time_feature": True})  # it truncates itself: no registered limit
    with pytest.raises(ValueError, match="needs the episode's time limit"):
        TimeFeature(Counter())
    with pytest.raises(ValueError, match="1-D Box"):
        TimeFeature(ImageEnv(), max_steps=10)
    assert not isinstance(make_env("herl/PointReach-v0", {"time_feature": False}), TimeFeature)


class ImageEnv(Counter):
    observation_space = gym.spaces.Box(0, 1, (2, 2), np.float32)


def test_a_run_trains_evaluates_and_resumes_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    args = ["--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "300", "--progress", "off",
            "--set", "env.time_feature=true", "--set", "eval.freq=300", "--set", "eval.episodes=2",
            "--set", "learning_starts=100", "--set", "checkpoint.freq=200"]
    assert main(["train", *args, "--run-dir", str(tmp_path)]) == 0
    run = tmp_path / "seed_0"
    assert json.loads((run / "config.json").read_text())["env_kwargs"] == {"time_feature": True}
    rows = [r for r in csv.DictReader(open(run / "progress.csv")) if r.get("eval/success_rate")]
    assert rows
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert main(["train", "--resume", str(run), "--timesteps", "400", "--progress", "off"]) == 0
