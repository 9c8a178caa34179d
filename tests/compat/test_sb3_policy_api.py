"""SB3's policy-level API: ``model.policy.save(path)`` / ``Policy.load(path)``, ``model.policy.device``,
``model.policy.optimizer`` (read and assigned), and
``model.actor.predict(obs)`` / ``model.q_net.predict(obs)`` returning ``(actions, state)``."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
import torch

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer
from herl.envs import BitFlippingEnv
from herl.training.base import Policy

SMALL = dict(learning_starts=10, batch_size=16, policy_kwargs=dict(net_arch=[16]), seed=0)
CONTINUOUS = [SAC, TD3, DDPG, TQC, CrossQ]


def make(model_class):
    env = BitFlippingEnv(4, continuous=model_class is not DQN, max_steps=4)
    model = model_class("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, **SMALL)
    model.learn(20)
    return model, env


def batch(env, n=6):
    obs = [env.reset(seed=s)[0] for s in range(n)]
    return {k: np.stack([o[k] for o in obs]) for k in obs[0]}


@pytest.mark.parametrize("model_class", [*CONTINUOUS, DQN])
def test_policy_save_and_policy_load_predict_as_the_model(model_class, tmp_path):
    model, env = make(model_class)
    obs = batch(env)
    expected = model.predict(obs, deterministic=True)[0]
    model.policy.save(tmp_path / "policy")  # SB3's name: written as policy.zip, a herl model file
    assert (tmp_path / "policy.zip").is_file()
    policy = Policy.load(tmp_path / "policy", device="cpu")
    assert isinstance(policy, Policy) and policy.device == torch.device("cpu")
    np.testing.assert_array_equal(policy.predict(obs, deterministic=True)[0], expected)
    # SB3 calls load on the class it has at hand: the policy's own class, through an instance too
    np.testing.assert_array_equal(model.policy.load(tmp_path / "policy.zip")
                                  .predict(obs, deterministic=True)[0], expected)
    # and the file is a whole model's
    assert isinstance(model_class.load(tmp_path / "policy.zip"), model_class)
    stream = io.BytesIO()
    model.policy.save(stream)
    stream.seek(0)
    np.testing.assert_array_equal(Policy.load(stream).predict(obs, deterministic=True)[0], expected)


@pytest.mark.parametrize("model_class", CONTINUOUS)
def test_actor_predict_returns_the_models_actions_and_state(model_class):
    model, env = make(model_class)
    obs = batch(env)
    actions, state = model.actor.predict(obs, deterministic=True)
    assert state is None and actions.shape == (6, 4)
    np.testing.assert_array_equal(actions, model.predict(obs, deterministic=True)[0])
    np.testing.assert_array_equal(model.policy.actor.predict(obs, deterministic=True)[0], actions)
    single, _ = model.actor.predict({k: v[0] for k, v in obs.items()}, deterministic=True)
    np.testing.assert_allclose(single, actions[0], atol=1e-6)
    assert model.policy.device == model.device and model.policy.action_space == model.action_space


def test_q_net_predict_is_greedy_as_sb3s_and_the_models_predict_keeps_epsilon():
    model, env = make(DQN)
    obs = batch(env, 200)
    greedy = model.predict(obs, deterministic=True)[0]
    model.exploration_rate = 1.0  # SB3's q_net.predict and policy.predict ignore it; model.predict does not
    for predict in (model.q_net.predict, model.policy.q_net.predict, model.policy.predict):
        actions, state = predict(obs)
        assert state is None and actions.dtype == np.int64
        np.testing.assert_array_equal(actions, greedy)
    assert not np.array_equal(model.predict(obs)[0], greedy)


@pytest.mark.parametrize("model_class", [SAC, TD3, DQN])
def test_networks_stay_plain_modules_copies_and_pickles_belong_to_no_model(model_class):
    model, env = make(model_class)
    name = "q_net" if model_class is DQN else "actor"
    network = getattr(model, name)
    assert all(torch.is_tensor(v) for v in network.state_dict().values())
    assert all(torch.is_tensor(v) for v in model.policy.state_dict().values())
    obs = batch(env)
    for copied in (copy.deepcopy(network), pickle.loads(pickle.dumps(network))):
        with pytest.raises(RuntimeError, match="not the network a model acts with.*model.predict"):
            copied.predict(obs)
        torch.testing.assert_close(copied.state_dict(), network.state_dict())
    target = model.q_net_target if model_class is DQN else model.critic_target
    with pytest.raises(RuntimeError, match="not the network a model acts with") if model_class is DQN else \
            pytest.raises(AttributeError):
        target.predict(obs)
    copy.deepcopy(model.critic if model_class is not DQN else model.q_net)  # as the algorithms copy their targets
    # the original still predicts, and a model built on the loaded weights binds its own networks
    np.testing.assert_array_equal(network.predict(obs, deterministic=True)[0],
                                  model.predict(obs, deterministic=True)[0])


@pytest.mark.parametrize("model_class, name", [(SAC, "actor"), (TD3, "actor"), (TQC, "actor"), (DQN, "q_net")],
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_the_acting_network_saves_and_its_class_loads_it_back_predicting_alone(model_class, name, tmp_path):
    """SB3's ``actor.save(path)`` / ``Actor.load(path)`` (and DQN's ``q_net``): the loaded network predicts as the saved
    one did, with no model kept by the caller; a network a model does not act with refuses to save, naming the fix."""
    model, env = make(model_class)
    network = getattr(model, name)
    obs = batch(env)
    expected, _ = network.predict(obs, deterministic=True)
    network.save(tmp_path / "net.zip")
    network_class = type(network)
    del model, network
    loaded = network_class.load(tmp_path / "net.zip", device="cpu")
    import gc

    gc.collect()  # the loaded network holds its model: predicting still works
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], expected)
    with pytest.raises(RuntimeError, match="model.save"):
        copy.deepcopy(loaded).save(tmp_path / "copy.zip")


@pytest.mark.parametrize("model_class", [SAC, TD3, DQN, CrossQ])
def test_an_assigned_policy_optimizer_trains_and_files_start_herls_adam_anew(model_class, tmp_path):
    """``model.policy.optimizer = ...`` (SB3 code does it) is the optimizer the next updates step; files keep no
    state of it (an optimizer is code), say so when saved and loaded, and the loaded model trains with herl's Adam."""
    model, env = make(model_class)
    assert model.policy.optimizer is model.optimizers["optimizer"]
    trained = {k: p.detach().clone() for k, p in model.policy.named_parameters() if "_target" not in k}
    model.policy.optimizer = torch.optim.SGD(model.policy.parameters(), lr=0.0)  # holds the target networks too
    model.learn(20, reset_num_timesteps=False)
    now = dict(model.policy.named_parameters())
    assert all(torch.equal(trained[k], now[k]) for k in trained)  # lr 0: the SGD it stepped moved nothing
    with pytest.warns(UserWarning, match=r"assigned by hand \(torch.optim.sgd.SGD\).*own optimizer .*started anew") as rec:
        model.save(tmp_path / "model")
    assert rec[0].filename == __file__
    with pytest.warns(UserWarning, match=r"model.zip: it was saved while training with an optimizer assigned") as rec:
        loaded = model_class.load(tmp_path / "model.zip", env=env)
    assert rec[0].filename == __file__
    assert isinstance(loaded.policy.optimizer, torch.optim.Adam) and not loaded.policy.optimizer.state
    for key, value in model.policy.state_dict().items():
        assert torch.equal(value, loaded.policy.state_dict()[key]), key
    loaded.learn(20, reset_num_timesteps=False)
    assert loaded.policy.optimizer.state  # herl's Adam took steps
    with pytest.raises(TypeError, match="policy.optimizer must be a torch.optim.Optimizer, got dict"):
        model.policy.optimizer = {"lr": 1e-3}


def test_a_damaged_assigned_optimizers_field_is_refused(tmp_path):
    import json
    import zipfile

    from herl.errors import ArchiveError

    model, env = make(SAC)
    model.policy.optimizer = torch.optim.Adam(model.policy.parameters())
    with pytest.warns(UserWarning):
        model.save(tmp_path / "model")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    meta_name = next(name for name in entries if name.endswith(".json"))
    meta = json.loads(entries[meta_name])
    fields = meta.get("meta", meta)
    fields["assigned_optimizers"] = {"critic": 3}
    entries[meta_name] = json.dumps(meta).encode()
    with zipfile.ZipFile(tmp_path / "damaged.zip", "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    with pytest.raises(ArchiveError, match="'assigned_optimizers' field is damaged"):
        SAC.load(tmp_path / "damaged.zip")
