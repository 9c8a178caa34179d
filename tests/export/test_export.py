"""ONNX and TorchScript export: the exported graph's actions equal predict(deterministic=True)'s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import herl
from herl.cli import main
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.export import check_onnx, export_torchscript, input_specs

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ACTOR_ALGOS = [herl.SAC, herl.TD3, herl.DDPG, herl.TQC, herl.CrossQ]


def _with_statistics(model, seed: int = 0):
    """Normalizer statistics (and CrossQ's running statistics) away from their initial values, as after training,
    so that the test sees normalization and clipping at work."""
    rng = np.random.default_rng(seed)
    dim = model.encoder.dim
    model.encoder.update(torch.as_tensor(rng.normal(0.3, 0.2, size=(64, dim)), dtype=torch.float32))
    with torch.no_grad():
        for name, buffer in model.nets.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0.0, 0.3)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
    return model


@pytest.mark.parametrize("algo", ACTOR_ALGOS, ids=lambda a: a.__name__)
def test_onnx_actions_equal_predict_on_point_reach(algo, tmp_path):
    # action bounds other than [-1, 1] check the scaling inside the graph
    env = PointReachEnv(dim=3)
    model = _with_statistics(algo("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[32, 32]), seed=0))
    path = model.export_onnx(tmp_path / "policy.onnx")
    assert check_onnx(model, path, n_observations=1000) <= 1e-5


def test_onnx_argmax_equals_dqn_predict_on_bit_flipping(tmp_path):
    model = _with_statistics(herl.DQN("MultiInputPolicy", BitFlippingEnv(n_bits=6), seed=0))
    path = model.export_onnx(tmp_path / "dqn.onnx")
    assert check_onnx(model, path, n_observations=1000) == 0.0
    import onnxruntime

    inputs = onnxruntime.InferenceSession(str(path)).get_inputs()
    assert [(i.name, i.type) for i in inputs] == [("observation", "tensor(int8)"), ("desired_goal", "tensor(int8)")]


def test_torchscript_module_equals_predict(tmp_path):
    model = _with_statistics(herl.TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=1))
    path = export_torchscript(model, tmp_path / "policy.pt")
    module = torch.jit.load(str(path))
    space = model.observation_space
    space.seed(0)
    obs = {k: np.stack([space[k].sample() for _ in range(50)]) for k in ("observation", "desired_goal")}
    got = module(*(torch.as_tensor(obs[s.name]) for s in input_specs(model))).numpy()
    np.testing.assert_allclose(got, model.predict(obs, deterministic=True)[0], atol=1e-6)


def test_check_onnx_catches_a_different_model(tmp_path):
    env = PointReachEnv()
    path = herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0).export_onnx(tmp_path / "a.onnx")
    other = herl.TD3("MultiInputPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=1)
    with pytest.raises(AssertionError, match="differ from predict"):
        check_onnx(other, path, n_observations=100)


def test_herl_export_command(tmp_path, capsys):
    model = herl.SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[16]), seed=0)
    model.save(tmp_path / "model.zip")
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.onnx")]) == 0
    out = capsys.readouterr().out
    assert "inputs: observation float32[batch, 4], desired_goal float32[batch, 2]" in out and "checked" in out
    assert main(["export", str(tmp_path / "model.zip"), "-o", str(tmp_path / "p.pt")]) == 0
    assert "TorchScript" in capsys.readouterr().out


@pytest.mark.parametrize("algo", [herl.SAC, herl.TD3], ids=lambda a: a.__name__)
def test_onnx_of_a_layer_normalized_actor_equals_predict(algo, tmp_path):
    model = _with_statistics(algo("MultiInputPolicy", PointReachEnv(dim=3), seed=0,
                                  policy_kwargs=dict(net_arch=[32, 32], layer_norm=True)))
    with torch.no_grad():  # scales and shifts away from 1 and 0, so a graph without them would differ
        for name, p in model.actor.named_parameters():
            if "norms" in name:
                p.uniform_(0.5, 1.5)
    path = model.export_onnx(tmp_path / "policy.onnx")
    assert check_onnx(model, path, n_observations=1000) <= 1e-5
