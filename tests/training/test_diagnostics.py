"""The diagnostics logged with training statistics: what they measure, and that reading them changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from herl import DQN, SAC, CrossQ, HerReplayBuffer
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.training.diagnostics import replay_diagnostics

SMALL = dict(learning_starts=50, batch_size=32, buffer_size=2000, policy_kwargs=dict(net_arch=[16]), seed=0)


def test_numbers_describe_the_buffer_and_critics():
    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(300)
    out = replay_diagnostics(model)
    assert set(out) == {f"diagnostics/{k}" for k in ("reward0_share", "goal_moves_share", "goal_moved_episodes", "q_mean",
                                                    "q_min", "q_max", "q_bound", "obs_std_min", "obs_std_max")}
    assert 0 < out["diagnostics/reward0_share"] < 1
    assert out["diagnostics/goal_moves_share"] > 0.9  # the point moves with (almost) every random action
    assert out["diagnostics/goal_moved_episodes"] == 1.0  # and no episode ends where it started
    assert out["diagnostics/q_min"] <= out["diagnostics/q_mean"] <= out["diagnostics/q_max"]
    assert out["diagnostics/q_bound"] == -1 / (1 - model.config.gamma)
    std = model.encoder.normalizer.std
    assert (out["diagnostics/obs_std_min"], out["diagnostics/obs_std_max"]) == (float(std.min()), float(std.max()))


def test_a_goal_that_never_moves_shows_as_zero():
    class Frozen(PointReachEnv):  # the achieved goal stays where the episode started
        def step(self, action):
            return super().step(np.zeros_like(action))

    model = SAC("MultiInputPolicy", Frozen(), replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(120)
    out = replay_diagnostics(model)
    assert out["diagnostics/goal_moves_share"] == 0.0
    assert out["diagnostics/goal_moved_episodes"] == 0.0
    assert out["diagnostics/reward0_share"] > 0.7  # every relabeled goal is where the point already is


def test_reading_them_changes_neither_sampling_nor_statistics():
    def trained(read: bool):
        model = CrossQ("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, **SMALL)
        model.learn(100)
        if read:
            replay_diagnostics(model)
        model.learn(100, reset_num_timesteps=False)
        return model

    a, b = trained(False), trained(True)
    for (name, x), (_, y) in zip(a.critic.state_dict().items(), b.critic.state_dict().items()):
        torch.testing.assert_close(x, y, msg=name)


def test_dqn_reads_the_taken_actions_values():
    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(200)
    batch = model.replay_buffer.sample(8)
    x = model.encoder.normalize(model.encoder.flatten(batch.observations))
    expected = model.q_net(x)[torch.arange(8), batch.actions.reshape(-1).long()]
    torch.testing.assert_close(model.q_estimates(batch), expected)
    assert np.isfinite(replay_diagnostics(model)["diagnostics/q_mean"])


def test_goal_moved_episodes_after_a_resume_equals_the_run_never_stopped(tmp_path):
    """Its window of the last 100 episodes travels in herl train's checkpoints: a resumed run's window started empty,
    and logged other numbers than the run never stopped."""
    import csv

    from herl.cli import main

    args = ["--env", "herl/BitFlipping-v0", "--progress", "off", "--set", "env.n_bits=4", "--set", "learning_starts=50",
            "--set", "eval.freq=100", "--set", "eval.episodes=2", "--set", "checkpoint.freq=100",
            "--set", "batch_size=16", "--set", "policy.net_arch=[16,16]", "--set", "log_interval=1",
            "--set", "exploration_fraction=0"]  # so that a run of 150 extended to 300 is the run of 300

    def logged(run):
        with open(run / "seed_0" / "progress.csv") as f:
            return [(int(float(row["time/total_timesteps"])), float(row["diagnostics/goal_moved_episodes"]))
                    for row in csv.DictReader(f) if row.get("diagnostics/goal_moved_episodes") not in (None, "")]

    assert main(["train", *args, "--timesteps", "300", "--run-dir", str(tmp_path / "whole")]) == 0
    assert main(["train", *args, "--timesteps", "150", "--run-dir", str(tmp_path / "parts")]) == 0
    assert main(["train", "--resume", str(tmp_path / "parts"), "--timesteps", "300", "--progress", "off"]) == 0
    whole = [row for row in logged(tmp_path / "whole") if row[0] > 150]
    resumed = [row for row in logged(tmp_path / "parts") if row[0] > 150]
    assert len(whole) > 10 and 0 < min(share for _, share in whole) < 1  # a window whose start matters
    assert resumed == whole


def test_goal_moved_history_is_checked_when_set():
    env = PointReachEnv()
    buffer = HerReplayBuffer(1000, env.observation_space, env.action_space, env=env)
    buffer.goal_moved_history = [True, False] * 60
    assert buffer.goal_moved_history == [True, False] * 50 and buffer.goal_moved_share == 0.5  # the last 100
    for bad in ([1, 0], "yes", [None]):
        with pytest.raises(ValueError, match="goal_moved_history must be a list of bools"):
            buffer.goal_moved_history = bad


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int64])
def test_goals_of_whole_numbers_and_booleans_are_read(dtype):
    """Boolean goals made training fail at its first log (torch has no `-` for booleans); unsigned ones wrapped."""
    from gymnasium import spaces

    class Bits(BitFlippingEnv):
        def __init__(self):
            super().__init__(n_bits=4, max_steps=4)
            goal = spaces.Box(0, 1, (4,), dtype=dtype)
            self.observation_space = spaces.Dict({"observation": goal, "achieved_goal": goal, "desired_goal": goal})

        def _get_obs(self):
            return {k: np.asarray(v).astype(dtype) for k, v in super()._get_obs().items()}

    model = DQN("MultiInputPolicy", Bits(), replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(120)
    out = replay_diagnostics(model)
    assert out["diagnostics/goal_moves_share"] > 0.9  # every action flips a bit
