"""``n_steps`` (SB3's argument) in every algorithm: the buffer gets n and gamma, the TD target bootstraps with the
batch's discounts, conflicting settings are refused, and SAC + n-step HER learns PointReach."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import herl
from herl import SAC, HerReplayBuffer, NStepReplayBuffer, evaluate_policy
from herl.buffers.samples import DictReplayBufferSamples
from herl.envs import BitFlippingEnv, PointReachEnv

SMALL = dict(learning_starts=50, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16]))


@pytest.mark.parametrize("algo", ["SAC", "TD3", "DDPG", "TQC", "CrossQ", "DQN"])
def test_every_algorithm_trains_on_n_step_her_batches(algo):
    env = BitFlippingEnv(n_bits=4, continuous=algo != "DQN", max_steps=4)
    model = getattr(herl, algo)("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, n_steps=3, gamma=0.9,
                                seed=0, **SMALL)
    assert (model.replay_buffer.n_steps, model.replay_buffer.gamma) == (3, 0.9)
    model.learn(120)
    batch = model.replay_buffer.sample(64)
    discounts = batch.discounts.numpy().ravel()
    assert np.isclose(discounts[:, None], [0.9, 0.81, 0.729]).any(axis=1).all()


def test_the_td_target_bootstraps_with_the_batch_discounts():
    env = PointReachEnv()
    model = SAC("MultiInputPolicy", env, gamma=0.9, clip_target=False, **SMALL)
    obs = {k: torch.zeros(3, *space.shape) for k, space in env.observation_space.spaces.items()}
    batch = DictReplayBufferSamples(obs, torch.zeros(3, 2), obs, dones=torch.tensor([[0.0], [1.0], [0.0]]),
                                    rewards=torch.tensor([[-1.0], [-2.0], [-0.5]]))
    next_values = torch.tensor([[-3.0], [-3.0], [-3.0]])
    torch.testing.assert_close(model.td_target(batch, next_values), torch.tensor([[-3.7], [-2.0], [-3.2]]))
    n_step = batch._replace(discounts=torch.tensor([[0.81], [0.9], [0.729]]))
    torch.testing.assert_close(model.td_target(n_step, next_values), torch.tensor([[-3.43], [-2.0], [-2.687]]))


def test_conflicting_n_step_settings_are_refused():
    env = PointReachEnv()
    with pytest.raises(ValueError, match="n_steps=3 but replay_buffer_kwargs has n_steps=5"):
        SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, n_steps=3,
            replay_buffer_kwargs=dict(n_steps=5), **SMALL)
    with pytest.raises(ValueError, match="gamma=0.5 but SAC has gamma=0.99"):
        SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, n_steps=3,
            replay_buffer_kwargs=dict(gamma=0.5), **SMALL)
    with pytest.raises(ValueError, match="n_steps"):
        SAC("MultiInputPolicy", env, n_steps=0, **SMALL)


def test_sb3_style_n_step_buffer_class(tmp_path):
    """SB3's own spelling: replay_buffer_class=NStepReplayBuffer with its n_steps and gamma in the kwargs."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    model = SAC("MlpPolicy", env, replay_buffer_class=NStepReplayBuffer, gamma=0.95,
                replay_buffer_kwargs=dict(n_steps=4, gamma=0.95), seed=0, **SMALL)
    model.learn(100)
    assert model.replay_buffer.sample(8).discounts is not None
    model.save_replay_buffer(tmp_path / "buffer")
    other = SAC("MlpPolicy", env, replay_buffer_class=NStepReplayBuffer, gamma=0.95,
                replay_buffer_kwargs=dict(n_steps=4, gamma=0.95), **SMALL)
    other.load_replay_buffer(tmp_path / "buffer")
    assert (other.replay_buffer.n_steps, other.replay_buffer.gamma) == (4, 0.95)
    with pytest.raises(ValueError, match="gamma=0.95 but SAC has gamma=0.99"):
        SAC("MlpPolicy", env, replay_buffer_class=NStepReplayBuffer, replay_buffer_kwargs=dict(n_steps=4, gamma=0.95),
            **SMALL)


@pytest.mark.slow
def test_sac_with_n_step_her_learns_point_reach():
    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, n_steps=3, seed=0,
                learning_rate=1e-3, gamma=0.95, tau=0.05, batch_size=128, learning_starts=200,
                policy_kwargs=dict(net_arch=[64, 64]))
    model.learn(3000)
    eval_env = PointReachEnv()
    eval_env.reset(seed=123)
    _, _, success = evaluate_policy(model, eval_env, n_eval_episodes=50, return_success_rate=True)
    assert success >= 0.9
