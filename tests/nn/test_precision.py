"""Mixed precision (``policy_kwargs=dict(precision="bfloat16")``): hidden-to-hidden matmuls in bfloat16, everything
a user keeps (weights, gradients, optimizer state, saved files, exported graphs) in float32."""

from __future__ import annotations

import pytest
import torch

from herl import SAC, TQC, CrossQ, HerReplayBuffer, evaluate_policy
from herl.envs import PointReachEnv
from herl.errors import ConfigError
from herl.nn import MLP, EnsembleMLP
from herl.nn.mlp import set_precision


def _pair(module_fn):
    """The same network twice: float32, and with bfloat16 hidden layers."""
    reference, mixed = module_fn(), module_fn()
    mixed.load_state_dict(reference.state_dict())
    set_precision(mixed, "bfloat16")
    return reference, mixed


@pytest.mark.parametrize("make", [
    lambda: MLP(7, 3, [64, 64, 64], generator=torch.Generator().manual_seed(0)),
    lambda: EnsembleMLP(7, 5, [64, 64, 64], n_members=2, generator=torch.Generator().manual_seed(0)),
], ids=["mlp", "ensemble"])
def test_bfloat16_hidden_layers_track_float32(make):
    reference, mixed = _pair(make)
    x = torch.randn(128, 7, generator=torch.Generator().manual_seed(1))
    x_mixed, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, ref = mixed(x_mixed), reference(x_ref)
    assert out.dtype == torch.float32  # callers never see bfloat16
    scale = ref.abs().mean()
    assert (out - ref).abs().max() < 0.05 * scale  # bfloat16 keeps 8 bits of mantissa
    assert not torch.equal(out, ref)  # the bfloat16 path did run
    out.square().sum().backward()
    ref.square().sum().backward()
    # what an actor's update follows: the gradient with respect to the inputs (the actions), row by row; a
    # pre-activation within rounding of 0 can switch its ReLU, so single rows may turn by some degrees
    cosine = torch.nn.functional.cosine_similarity(x_mixed.grad, x_ref.grad, dim=1)
    assert cosine.mean() > 0.995 and cosine.quantile(0.05) > 0.98
    for (name, p), q in zip(mixed.named_parameters(), reference.parameters()):
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
        cosine = torch.nn.functional.cosine_similarity(p.grad.flatten(), q.grad.flatten(), dim=0)
        assert cosine > 0.99, name


def test_networks_without_two_hidden_layers_are_unchanged():
    # one hidden layer has no hidden-to-hidden matmul: nothing is cast, results are bitwise float32
    reference, mixed = _pair(lambda: EnsembleMLP(4, 2, [16], generator=torch.Generator().manual_seed(0)))
    x = torch.randn(8, 4)
    assert torch.equal(reference(x), mixed(x))
    reference, mixed = _pair(lambda: MLP(4, 2, [16], generator=torch.Generator().manual_seed(0)))
    assert torch.equal(reference(x), mixed(x))


@pytest.mark.parametrize("algo", [SAC, TQC], ids=lambda a: a.__name__)
def test_bfloat16_models_learn_save_and_load(algo, tmp_path):
    env = PointReachEnv()
    model = algo("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, learning_starts=200,
                 learning_rate=1e-3, gamma=0.95, tau=0.05, batch_size=128,
                 policy_kwargs=dict(net_arch=[64, 64, 64], precision="bfloat16"))
    model.learn(3000)
    assert model.policy_config.precision == "bfloat16"
    assert all(p.dtype == torch.float32 for p in model.nets.parameters())
    *_, success = evaluate_policy(model, PointReachEnv(), n_eval_episodes=20, return_success_rate=True, seed=1)
    assert success >= 0.9
    model.save(tmp_path / "m")
    loaded = algo.load(tmp_path / "m")
    assert loaded.policy_config.precision == "bfloat16"
    obs, _ = PointReachEnv().reset(seed=3)
    assert (loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]).all()


def test_bad_precision_is_refused():
    with pytest.raises(ConfigError, match="precision.*bfloat16"):
        SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(precision="float16"))
    with pytest.raises(ValueError, match="CrossQ.*float32"):
        CrossQ("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(precision="bfloat16"))
