"""Layer norm in the hidden layers (``policy_kwargs=dict(layer_norm=True | "critic")``, SB2's ``LnMlpPolicy``):
what ``nn.LayerNorm`` computes, in both network forms and both precisions, where the setting asks, saved and
restored; bad values and CrossQ refused with the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ, HerReplayBuffer, evaluate_policy
from herl.compat.sb2 import HER
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.errors import ConfigError
from herl.nn import MLP, EnsembleMLP
from herl.nn.mlp import set_precision


def _randomize_norms(module: nn.Module, seed: int) -> None:
    """Give the layer norms' scales and shifts values other than 1 and 0, so a test sees them used."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=g))


def _reference(mlp: MLP, x: torch.Tensor) -> torch.Tensor:
    """``mlp`` written out with torch's own modules: Linear, LayerNorm, activation; the last Linear alone."""
    *hidden, last = mlp.layers
    for layer, norm in zip(hidden, mlp.norms):
        ln = nn.LayerNorm(norm.normalized_shape)
        ln.load_state_dict(norm.state_dict())
        x = torch.relu(ln(layer(x)))
    return last(x)


def test_mlp_applies_a_layer_norm_before_each_hidden_activation():
    mlp = MLP(5, 3, [16, 8], layer_norm=True, generator=torch.Generator().manual_seed(0))
    assert [n.normalized_shape for n in mlp.norms] == [(16,), (8,)]
    _randomize_norms(mlp, 1)
    x = torch.randn(10, 5) * 50 + 7  # the hidden layers' scale does not matter after the norm
    torch.testing.assert_close(mlp(x), _reference(mlp, x))
    assert MLP(5, 3, [16, 8]).norms is None


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_ensemble_with_layer_norm_equals_separate_mlps(precision):
    g = torch.Generator().manual_seed(0)
    ensemble = EnsembleMLP(7, 4, [16, 16, 8], n_members=3, layer_norm=True, generator=g)
    members = [MLP(7, 4, [16, 16, 8], layer_norm=True, generator=g) for _ in range(3)]
    for i, mlp in enumerate(members):
        _randomize_norms(mlp, 10 + i)
        ensemble.load_member_(i, mlp)
    for module in (ensemble, *members):
        set_precision(module, precision)
    x = torch.randn(6, 7)
    out = ensemble(x)
    assert out.dtype == torch.float32 and out.shape == (3, 6, 4)
    for i, mlp in enumerate(members):
        torch.testing.assert_close(out[i], mlp(x), atol=1e-5, rtol=1e-5)
    if precision == "float32":
        for i, mlp in enumerate(members):
            torch.testing.assert_close(out[i], _reference(mlp, x))
    with pytest.raises(ValueError, match="layer norms"):
        ensemble.load_member_(0, MLP(7, 4, [16, 16, 8]))


def test_layer_norm_parameters_learn_and_detach_like_the_weights():
    ensemble = EnsembleMLP(3, 1, [8, 8], n_members=2, layer_norm=True)
    x = torch.randn(16, 3, requires_grad=True)
    ensemble(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ensemble.norm_biases)
    ensemble.zero_grad(set_to_none=True)
    ensemble(x, detach_params=True).sum().backward()  # the actor's loss through the critic
    assert all(p.grad is None for p in ensemble.parameters())


@pytest.mark.parametrize("algo", [SAC, TQC, TD3, DDPG])
@pytest.mark.parametrize("layer_norm", [True, "critic"])
def test_layer_norm_goes_where_the_setting_says(algo, layer_norm):
    model = algo("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[32, 32], layer_norm=layer_norm))
    assert model.critic.norm_weights is not None and model.critic_target.norm_weights is not None
    assert (model.actor.net.norms is not None) == (layer_norm is True)
    plain = algo("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[32, 32]))
    assert plain.critic.norm_weights is None and plain.actor.net.norms is None


def test_dqn_q_network_has_layer_norm_with_either_value():
    for value in (True, "critic"):
        model = DQN("MultiInputPolicy", BitFlippingEnv(4), policy_kwargs=dict(layer_norm=value))
        assert model.q_net.norms is not None and model.q_net_target.norms is not None


@pytest.mark.slow
def test_sac_with_layer_norm_learns_saves_and_loads(tmp_path):
    env = PointReachEnv()
    model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, learning_starts=200,
                learning_rate=1e-3, gamma=0.95, tau=0.05, batch_size=128,
                policy_kwargs=dict(net_arch=[64, 64], layer_norm=True))
    model.learn(3000)
    *_, success = evaluate_policy(model, PointReachEnv(), n_eval_episodes=20, return_success_rate=True, seed=1)
    assert success >= 0.9
    assert model.critic.norm_weights[0].detach().std() > 0  # the critics' scales were trained
    model.save(tmp_path / "m")
    loaded = SAC.load(tmp_path / "m")
    assert loaded.policy_config.layer_norm is True
    for (name, p), q in zip(model.nets.named_parameters(), loaded.nets.parameters()):
        assert torch.equal(p, q), name
    obs, _ = PointReachEnv().reset(seed=3)
    assert (loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]).all()


def test_sb2_ln_mlp_policy_is_mlp_policy_with_layer_norm(tmp_path):
    env = BitFlippingEnv(4, continuous=True, max_steps=4)
    model = HER("LnMlpPolicy", env, SAC, learning_starts=20, batch_size=16, seed=0)
    assert model.policy == "LnMlpPolicy" and model.model.policy_config.layer_norm is True
    assert model.model.policy_config.actor_arch == (64, 64)  # SB2's MlpPolicy sizes
    model.learn(60)
    model.save(tmp_path / "ln")
    assert HER.load(tmp_path / "ln").policy == "LnMlpPolicy"
    dqn = HER("LnMlpPolicy", BitFlippingEnv(4), DQN, learning_starts=20, batch_size=16)
    assert dqn.model.q_net.advantage.norms is not None and dqn.model.q_net.value.norms is not None  # dueling, as SB2
    with pytest.raises(ValueError, match="LnMlpPolicy sets policy_kwargs layer_norm=True"):
        HER("LnMlpPolicy", env, SAC, policy_kwargs=dict(layer_norm=False))
    with pytest.raises(ValueError, match="unknown policy 'CnnPolicy'"):
        HER("CnnPolicy", env, SAC)


def test_bad_layer_norm_values_and_crossq_are_refused():
    with pytest.raises(ConfigError, match="layer_norm='actor'.*'critic'"):
        SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(layer_norm="actor"))
    with pytest.raises(ValueError, match="CrossQ.*batch-renormalized"):
        CrossQ("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(layer_norm=True))
