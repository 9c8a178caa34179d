"""The diagnostics logged with training statistics: what they measure, and that reading them changes nothing."""

from __future__ import annotations

import numpy as np
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
