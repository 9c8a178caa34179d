"""ActionRepeat: each decision is ``repeat`` env steps; ``env.action_repeat=k`` puts it in every env a run makes."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from herl.cli import main
from herl.envs import ActionRepeat, PointReachEnv
from herl.run.envs import ReplayableEnv, make_env
from herl.run.errors import CLIError


class Counter(gym.Env):
    """A flat env whose observation is its step count and whose reward is the step number (1, 2, 3, ...)."""

    observation_space = gym.spaces.Box(0, 1000, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), float(self.t), False, False, {"t": self.t}


def test_each_decision_is_repeat_steps_and_the_time_limit_cuts_the_last():
    env = ActionRepeat(gym.wrappers.TimeLimit(Counter(), max_episode_steps=8), 3)
    env.reset(seed=0)
    seen = []
    while True:
        obs, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
        seen.append((int(obs[0]), reward, info["env_steps"], info["t"]))
        if terminated or truncated:
            break
    # a plain env sums the rewards of the steps (1+2+3, 4+5+6, 7+8)
    assert seen == [(3, 6.0, 3, 3), (6, 15.0, 3, 6), (8, 15.0, 2, 8)]
    assert truncated and not terminated


def test_a_goal_env_gets_the_reward_of_the_state_reached():
    env = ActionRepeat(gym.wrappers.TimeLimit(PointReachEnv(max_episode_steps=None), max_episode_steps=50), 4)
    obs, _ = env.reset(seed=3)
    decisions = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        decisions += 1
        assert reward == env.unwrapped.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)
        if terminated or truncated:
            break
    assert decisions == 13  # 12 decisions of 4 steps and one of 2


def test_the_same_actions_lead_to_the_same_states_as_stepping_by_hand():
    plain = gym.wrappers.TimeLimit(PointReachEnv(max_episode_steps=None), max_episode_steps=50)
    repeated = ActionRepeat(gym.wrappers.TimeLimit(PointReachEnv(max_episode_steps=None), max_episode_steps=50), 3)
    plain.reset(seed=7)
    repeated.reset(seed=7)
    rng = np.random.default_rng(0)
    for _ in range(5):
        action = rng.uniform(-1, 1, 2).astype(np.float32)
        for _ in range(3):
            expected = plain.step(action)[0]
        got = repeated.step(action)[0]
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])


def test_a_replayable_env_restores_through_the_repeat():
    env = ReplayableEnv(make_env("herl/PointReach-v0", {"action_repeat": 3}))
    assert isinstance(env.env, ActionRepeat) and env.env.repeat == 3
    env.reset(seed=1)
    for action in np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2):
        obs = env.step(action)[0]
    fresh = ReplayableEnv(make_env("herl/PointReach-v0", {"action_repeat": 3}))
    restored = fresh.restore(*env.snapshot())
    for key in obs:
        np.testing.assert_array_equal(restored[key], obs[key])


@pytest.mark.parametrize("value", [0, -2, 1.5, "three", True])
def test_a_bad_repeat_is_named(value):
    with pytest.raises(CLIError, match="env.action_repeat must be an integer >= 1"):
        make_env("herl/PointReach-v0", {"action_repeat": value})
    with pytest.raises(ValueError, match="action_repeat must be an integer >= 1"):
        ActionRepeat(PointReachEnv(), value)


def test_one_is_no_wrapper_and_the_env_never_sees_the_argument():
    assert not isinstance(make_env("herl/PointReach-v0", {"action_repeat": 1}), ActionRepeat)
    env = make_env("herl/PointReach-v0", {"action_repeat": 2, "max_episode_steps": 10})
    env.reset(seed=0)
    steps = 0
    while not any(env.step(env.action_space.sample())[2:4]):
        steps += 1
    assert steps + 1 == 5  # 10 env steps, 2 per decision


def test_a_run_trains_and_evaluates_with_the_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    args = ["--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "300", "--progress", "off",
            "--set", "env.action_repeat=5", "--set", "eval.freq=300", "--set", "eval.episodes=2",
            "--set", "learning_starts=100"]
    assert main(["train", *args, "--run-dir", str(tmp_path)]) == 0
    assert "300 decisions (action repeat 5: up to 1,500 env steps)" in capsys.readouterr().out  # what --timesteps counts
    import csv
    import json

    run = tmp_path / "seed_0"
    assert json.loads((run / "config.json").read_text())["env_kwargs"] == {"action_repeat": 5}
    rows = [r for r in csv.DictReader(open(run / "progress.csv")) if r.get("eval/mean_ep_length")]
    assert {float(r["eval/mean_ep_length"]) for r in rows} == {10.0}  # 50 env steps in 10 decisions
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
