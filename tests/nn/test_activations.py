"""Every activation herl takes: by class or name, saved by name, loaded to the same predictions, trained on as if
never saved, exported to ONNX with the same actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.wrappers import TimeLimit
from torch import nn

from herl import SAC, HerReplayBuffer
from herl.envs import PointReachEnv
from herl.nn.mlp import ACTIVATIONS


def model(activation) -> SAC:
    return SAC("MultiInputPolicy", TimeLimit(PointReachEnv(), 10), replay_buffer_class=HerReplayBuffer,
               learning_starts=20, batch_size=16, policy_kwargs=dict(net_arch=[16, 16], activation_fn=activation),
               seed=0)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_an_activation_round_trips_by_name(name, tmp_path):
    saved = model(ACTIVATIONS[name])
    assert saved.policy_config.activation == name and isinstance(saved.actor, nn.Module)
    saved.learn(40)
    saved.save(tmp_path / "model.zip")
    saved.save_replay_buffer(tmp_path / "buffer.zip")
    loaded = SAC.load(tmp_path / "model.zip", env=TimeLimit(PointReachEnv(), 10))
    loaded.load_replay_buffer(tmp_path / "buffer.zip")
    observation = PointReachEnv().reset(seed=1)[0]
    assert np.array_equal(saved.predict(observation, deterministic=True)[0],
                          loaded.predict(observation, deterministic=True)[0])
    saved.set_env(TimeLimit(PointReachEnv(), 10))
    for m in (saved, loaded):
        m.learn(20, reset_num_timesteps=False)
    for (key, a), (_, b) in zip(saved.actor.state_dict().items(), loaded.actor.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=key)


def test_an_unknown_activation_is_refused_with_the_list():
    with pytest.raises(ValueError, match=r"activation_fn Hardtanh is not supported: use one of \['elu', 'gelu'"):
        model(nn.Hardtanh)


@pytest.mark.parametrize("name", ["gelu", "mish"])
def test_an_activation_exports_to_onnx(name, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    trained = model(name)
    trained.learn(40)
    path = trained.export_onnx(tmp_path / "policy.onnx")
    session = onnxruntime.InferenceSession(str(path))
    observation = PointReachEnv().reset(seed=1)[0]
    actions = session.run(None, {i.name: np.asarray(observation[i.name], np.float32)[None]
                                 for i in session.get_inputs()})[0]
    np.testing.assert_allclose(actions[0], trained.predict(observation, deterministic=True)[0], atol=1e-5)
