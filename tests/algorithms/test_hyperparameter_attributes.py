"""Hyperparameters read and write as model attributes, as in Stable-Baselines3: ``model.gamma`` reads the value training
uses, and ``model.gamma = 0.5`` changes it (checked as the constructor checks it), or is refused with the fix when the
value shaped what was built."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer
from herl.errors import ConfigError
from herl.envs import PointReachEnv

ALGOS = (DQN, DDPG, TD3, SAC, TQC, CrossQ)


def make(cls, **kwargs):
    env = "CartPole-v1" if cls is DQN else "Pendulum-v1"
    return cls("MlpPolicy", env, policy_kwargs=dict(net_arch=[8]), learning_starts=10, batch_size=4, seed=0, **kwargs)


@pytest.mark.parametrize("cls", ALGOS, ids=lambda c: c.__name__)
def test_every_hyperparameter_reads_as_an_attribute(cls):
    model = make(cls, gamma=0.9)
    for field in dataclasses.fields(model.config):
        if field.name not in vars(model):  # SAC's target_entropy reads as the number "auto" resolved to
            assert getattr(model, field.name) == getattr(model.config, field.name), field.name
    assert model.gamma == 0.9
    with pytest.raises(AttributeError, match="no attribute 'gamma_'"):
        model.gamma_


@pytest.mark.parametrize("cls", ALGOS, ids=lambda c: c.__name__)
def test_setting_one_changes_what_training_reads_and_what_is_saved(cls, tmp_path):
    model = make(cls)
    model.gamma, model.batch_size, model.learning_rate, model.learning_starts = 0.5, 6, 1e-2, 5
    assert (model.config.gamma, model.config.batch_size, model.config.learning_starts) == (0.5, 6, 5)
    assert all(group["lr"] == 1e-2 for opt in model.optimizers.values() for group in opt.param_groups)
    batch = model.replay_buffer
    model.learn(20)
    assert batch is model.replay_buffer
    model.save(tmp_path / "m.zip")
    loaded = cls.load(tmp_path / "m.zip")
    assert (loaded.gamma, loaded.batch_size, loaded.learning_rate) == (0.5, 6, 1e-2)


def test_gamma_reaches_the_td_target_and_the_n_step_buffer():
    model = SAC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer, n_steps=3, clip_target=True,
                policy_kwargs=dict(net_arch=[8]), seed=0)
    model.gamma = 0.5
    assert model.replay_buffer.gamma == 0.5
    assert model._target_bounds == (-2.0, 0.0)
    batch = type("Batch", (), {"rewards": torch.zeros(1, 1), "dones": torch.zeros(1, 1), "discounts": None})()
    assert model.td_target(batch, torch.full((1, 1), -1.0)).item() == -0.5


def test_a_bad_value_is_refused_as_the_constructor_refuses_it_and_nothing_changes():
    model = make(SAC)
    with pytest.raises(ConfigError, match="gamma"):
        model.gamma = 1.5
    assert model.gamma == 0.99


@pytest.mark.parametrize("cls, name, value", [(SAC, "buffer_size", 10), (SAC, "normalize_observations", True),
                                              (SAC, "n_steps", 3), (SAC, "ent_coef", 0.1), (TD3, "actor_learning_rate", 1e-3),
                                              (TQC, "top_quantiles_to_drop_per_net", 0), (CrossQ, "adam_beta1", 0.9)])
def test_one_that_shaped_the_model_is_refused_with_the_fix(cls, name, value):
    model = make(cls)
    before = getattr(model, name)
    with pytest.raises(AttributeError, match=f"{name}.*load\\(path, env=..., {name}="):
        setattr(model, name, value)
    assert getattr(model, name) == before


def test_sac_target_entropy_and_dqn_exploration_follow():
    sac = make(SAC)
    sac.target_entropy = -3.0
    assert sac.target_entropy == -3.0 and sac.config.target_entropy == -3.0
    dqn = make(DQN, exploration_fraction=0.5)
    dqn.exploration_final_eps = 0.2
    dqn.learn(40)
    assert np.isclose(dqn.exploration_rate, 0.2)
