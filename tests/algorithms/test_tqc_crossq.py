"""TQC and CrossQ: the quantile loss and its truncation against hand-computed cases, batch renormalization,
their arguments' errors, saving the renormalization statistics, and learning PointReach."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

import herl.algorithms.tqc as tqc_module
from herl import DQN, TQC, CrossQ, HerReplayBuffer, evaluate_policy
from herl.algorithms.tqc import _pairwise_quantile_huber_loss, quantile_huber_loss
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.nn.batch_renorm import BatchRenorm, RenormMLP

SMALL = dict(learning_starts=32, batch_size=16, buffer_size=1000, policy_kwargs=dict(net_arch=[16, 16]))


def test_quantile_huber_loss_hand_computed():
    # atoms 0 and 1 estimate the 0.25 and 0.75 quantiles; the target samples are 0.5 and 3.
    # (atom, target): (0, 0.5) 0.25 * 0.125; (0, 3) 0.25 * 2.5; (1, 0.5) |0.75 - 1| * 0.125; (1, 3) 0.75 * 1.5
    quantiles = torch.tensor([[[0.0, 1.0]]])
    targets = torch.tensor([[0.5, 3.0]])
    expected = (0.25 * 0.125 + 0.25 * 2.5 + 0.25 * 0.125 + 0.75 * 1.5) / 4
    assert quantile_huber_loss(quantiles, targets).item() == pytest.approx(expected)


def pairwise_quantile_huber_loss(quantiles, targets):
    """The textbook form, every (atom, target) pair spelled out (what sb3-contrib computes)."""
    n_quantiles = quantiles.shape[-1]
    tau = (torch.arange(n_quantiles, dtype=quantiles.dtype) + 0.5) / n_quantiles
    delta = targets[None, :, None, :] - quantiles[..., None]
    huber = torch.where(delta.abs() > 1, delta.abs() - 0.5, 0.5 * delta.square())
    return ((tau[:, None] - (delta < 0).to(delta.dtype)).abs() * huber).mean()


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0])
def test_quantile_huber_loss_matches_the_pairwise_form(scale):
    gen = torch.Generator().manual_seed(int(scale * 10))
    quantiles = (scale * torch.randn(3, 64, 7, generator=gen)).requires_grad_()
    targets = scale * torch.randn(64, 12, generator=gen) - 5.0  # unsorted, off-centre
    targets[:5, 3:6] = quantiles[0, :5, :3].detach() + 1.0  # ties at a run's boundary
    loss = quantile_huber_loss(quantiles, targets)
    (grad,) = torch.autograd.grad(loss, quantiles)
    reference = pairwise_quantile_huber_loss(quantiles, targets)
    (reference_grad,) = torch.autograd.grad(reference, quantiles)
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, reference_grad, rtol=1e-4, atol=1e-9)
    sorted_loss = quantile_huber_loss(quantiles, targets.sort(dim=1).values, targets_sorted=True)
    torch.testing.assert_close(sorted_loss, reference, rtol=1e-5, atol=1e-6)


def test_the_form_for_compilers_matches_the_textbook_form_in_value_and_gradient():
    """The compiled step's form computes its gradient beside the loss and hands it on through a carrier term: the
    value is the loss's exactly as computed, the gradient the textbook form's, through autograd and torch.func alike."""
    gen = torch.Generator().manual_seed(5)
    quantiles = (3.0 * torch.randn(2, 64, 7, generator=gen)).requires_grad_()
    targets = 3.0 * torch.randn(64, 12, generator=gen) - 5.0
    targets[:5, 3:6] = quantiles[0, :5, :3].detach() + 1.0  # |delta| exactly 1: the Huber kernel's seam
    targets[5:9, :3] = quantiles[1, 5:9, :3].detach()  # delta exactly 0
    loss = _pairwise_quantile_huber_loss(quantiles, targets)
    (grad,) = torch.autograd.grad(loss, quantiles)
    reference = pairwise_quantile_huber_loss(quantiles, targets)
    (reference_grad,) = torch.autograd.grad(reference, quantiles)
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, reference_grad, rtol=1e-5, atol=1e-10)
    func_grad = torch.func.grad(lambda q: _pairwise_quantile_huber_loss(q, targets))(quantiles.detach())
    torch.testing.assert_close(func_grad, reference_grad, rtol=1e-5, atol=1e-10)
    assert _pairwise_quantile_huber_loss(quantiles.detach(), targets) == loss  # the carrier adds exactly nothing


@pytest.mark.slow
def test_the_compiled_quantile_huber_loss_takes_the_pairwise_form_with_the_same_values():
    """Under torch.compile the loss is the pairwise form (a compiler fuses it; the sorted form's binary search would
    stay an eager op): the same loss and gradients as the eager sorted form, sorted targets or not."""
    gen = torch.Generator().manual_seed(3)
    quantiles = (3.0 * torch.randn(2, 64, 7, generator=gen)).requires_grad_()
    targets = 3.0 * torch.randn(64, 12, generator=gen) - 5.0
    targets[:5, 3:6] = quantiles[0, :5, :3].detach() + 1.0  # ties at a run's boundary
    for sorted_targets in (False, True):
        t = targets.sort(dim=1).values if sorted_targets else targets
        torch._dynamo.reset()
        compiled = torch.compile(lambda q, t: quantile_huber_loss(q, t, targets_sorted=sorted_targets), fullgraph=True)
        loss = compiled(quantiles, t)
        (grad,) = torch.autograd.grad(loss, quantiles)
        eager = quantile_huber_loss(quantiles, t, targets_sorted=sorted_targets)
        (eager_grad,) = torch.autograd.grad(eager, quantiles)
        torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=1e-9)
    explained = torch._dynamo.explain(lambda q, t: quantile_huber_loss(q, t))(quantiles, targets)
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")}
    assert not any("sort" in op for op in ops), ops

def test_quantile_huber_loss_is_minimized_by_the_quantiles():
    # atoms fitted to many samples of U(0, 100) land near the (i + 0.5) / n quantiles (at this scale the
    # Huber kernel is linear almost everywhere; for |errors| < 1 it would be quadratic, giving expectiles)
    samples = 100 * torch.rand(1, 4000, generator=torch.Generator().manual_seed(0))
    atoms = torch.full((1, 1, 4), 50.0, requires_grad=True)
    optimizer = torch.optim.Adam([atoms], lr=1.0)
    for _ in range(400):
        optimizer.zero_grad()
        quantile_huber_loss(atoms, samples).backward()
        optimizer.step()
    np.testing.assert_allclose(atoms.detach().reshape(-1).numpy(), [12.5, 37.5, 62.5, 87.5], atol=2.0)


class FixedAtoms(torch.nn.Module):
    """A critic that returns the same atoms for every input: (critics, batch, quantiles)."""

    def __init__(self, atoms: torch.Tensor) -> None:
        super().__init__()
        self.atoms = atoms

    def forward(self, x, detach_params=False):
        return self.atoms[:, None, :].expand(self.atoms.shape[0], x.shape[0], self.atoms.shape[1])


def test_target_pools_sorts_and_drops_the_top_atoms(monkeypatch):
    env = PointReachEnv()
    model = TQC("MultiInputPolicy", env, seed=0, gamma=0.5, ent_coef=1e-9, top_quantiles_to_drop_per_net=2,
                policy_kwargs=dict(net_arch=[8], n_quantiles=4, n_critics=2), learning_starts=100, batch_size=3,
                target_update_interval=1000,
                replay_buffer_class=HerReplayBuffer)
    # critic 0's atoms 0..3, critic 1's 10..13: pooled and sorted 0 1 2 3 10 11 12 13; 2 * 2 dropped from the top
    model.critic_target = FixedAtoms(torch.tensor([[3.0, 1.0, 0.0, 2.0], [13.0, 10.0, 12.0, 11.0]]))
    seen = {}

    def capture(quantiles, targets, targets_sorted=False):
        seen["targets"], seen["sorted"] = targets.clone(), targets_sorted
        return quantile_huber_loss(quantiles, targets, targets_sorted=targets_sorted)

    monkeypatch.setattr(tqc_module, "quantile_huber_loss", capture)
    model.learn(6)
    batch = model.replay_buffer.sample(3)
    model._update(batch)
    assert model.n_target_quantiles == 4
    kept = torch.tensor([0.0, 1.0, 2.0, 3.0])
    expected = batch.rewards + (1 - batch.dones) * 0.5 * kept  # the entropy term is ~1e-9 * log-prob
    torch.testing.assert_close(seen["targets"], expected, atol=1e-6, rtol=0)
    assert seen["sorted"] and torch.equal(seen["targets"], seen["targets"].sort(dim=1).values)


def test_bad_arguments_name_the_fix():
    env = PointReachEnv()
    with pytest.raises(ValueError, match="top_quantiles_to_drop_per_net=25 would drop every one of the n_quantiles=25"):
        TQC("MultiInputPolicy", env, top_quantiles_to_drop_per_net=25)
    with pytest.raises(ValueError, match="top_quantiles_to_drop_per_net must be an integer >= 0"):
        TQC("MultiInputPolicy", env, top_quantiles_to_drop_per_net=-1)
    with pytest.raises(TypeError, match="n_quantiles must be an integer"):
        TQC("MultiInputPolicy", env, policy_kwargs=dict(n_quantiles=2.5))
    with pytest.raises(TypeError, match="this algorithm reads net_arch, activation_fn, n_critics, precision, layer_norm, features_extractor_class, .*, n_quantiles"):
        TQC("MultiInputPolicy", env, policy_kwargs=dict(n_quantile=5))
    with pytest.raises(TypeError, match="unsupported policy_kwargs \\['n_quantiles'\\]"):
        CrossQ("MultiInputPolicy", env, policy_kwargs=dict(n_quantiles=5))
    for algo in (TQC, CrossQ):
        with pytest.raises(ValueError, match="needs a Box action space.*use DQN"):
            algo("MultiInputPolicy", BitFlippingEnv(n_bits=4))
        with pytest.raises(AssertionError):  # SB3 asserts there: code written for it catches this one too
            algo("MultiInputPolicy", BitFlippingEnv(n_bits=4))
    with pytest.raises(ValueError, match=r"DQN needs a Discrete action space, got Box.*use SAC, TD3, DDPG, TQC or CrossQ"):
        DQN("MlpPolicy", "Pendulum-v1")
    with pytest.raises(ValueError, match="batch_norm_momentum must be in"):
        CrossQ("MultiInputPolicy", env, policy_kwargs=dict(batch_norm_momentum=0.0))
    for bad in (dict(batch_norm_momentum=float("nan")), dict(batch_norm_eps=float("nan")), dict(batch_norm_eps=0.0)):
        with pytest.raises(ValueError, match="batch_norm"):
            CrossQ("MultiInputPolicy", env, policy_kwargs=bad)
    with pytest.raises(ValueError, match="tau=0.05 is not allowed.*CrossQ has no target networks"):
        CrossQ("MultiInputPolicy", env, tau=0.05)
    with pytest.raises(ValueError, match="policy_delay must be an integer >= 1"):
        CrossQ("MultiInputPolicy", env, policy_delay=0)


def test_batch_renorm_is_batch_norm_during_warmup_then_uses_running_statistics():
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0)) * 4 + 2
    norm = BatchRenorm(3, warmup_steps=1, momentum=0.5)
    y = norm(x)  # warm-up: the batch's own statistics
    torch.testing.assert_close(y, (x - x.mean(0)) / (x.var(0) + 0.001).sqrt())
    torch.testing.assert_close(norm.running_mean, 0.5 * x.mean(0, keepdim=True))
    torch.testing.assert_close(norm.running_var, 0.5 + 0.5 * x.var(0, keepdim=True))
    # after the warm-up: x_hat * r + d, with r, d from the running statistics, clipped to [1/3, 3] and [-5, 5]
    mean, var = x.mean(0), x.var(0)
    running_std = (norm.running_var + 0.001).sqrt()
    r = ((var + 0.001).sqrt() / running_std).clamp(1 / 3, 3)
    d = ((mean - norm.running_mean) / running_std).clamp(-5, 5)
    expected = (x - mean) / (var + 0.001).sqrt() * r + d
    torch.testing.assert_close(norm(x), expected)
    # evaluation mode: running statistics only, and they stay as they are
    norm.eval()
    before = norm.running_mean.clone()
    torch.testing.assert_close(norm(x), (x - norm.running_mean) / (norm.running_var + 0.001).sqrt())
    torch.testing.assert_close(norm.running_mean, before)


def test_ensemble_members_keep_their_own_statistics():
    net = RenormMLP(3, 1, [5], n_members=2, generator=torch.Generator().manual_seed(0))
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(1))
    assert net(x).shape == (2, 32, 1)
    first, hidden = net.norms
    torch.testing.assert_close(first.running_mean[0], first.running_mean[1])  # the same input for both members
    assert not torch.allclose(hidden.running_mean[0], hidden.running_mean[1])  # different hidden features


def test_crossq_saves_and_restores_the_renormalization_statistics(tmp_path):
    env = PointReachEnv()
    model = CrossQ("MultiInputPolicy", env, seed=0, replay_buffer_class=HerReplayBuffer,
                   **{**SMALL, "policy_kwargs": dict(net_arch=[16, 16], renorm_warmup_steps=20)})
    model.learn(100)
    stats = {k: v.clone() for k, v in model.critic.state_dict().items() if "running" in k or "steps" in k}
    assert stats and all(not torch.equal(v, torch.zeros_like(v)) for k, v in stats.items() if "mean" in k)
    assert int(stats["norms.0.steps"]) == model._n_updates  # one training-mode pass per update
    obs = {k: np.stack([PointReachEnv().reset(seed=i)[0][k] for i in range(5)]) for k in env.observation_space.spaces}
    expected, _ = model.predict(obs, deterministic=True)
    model.save(tmp_path / "crossq.zip")
    loaded = CrossQ.load(tmp_path / "crossq.zip")
    for key, value in stats.items():
        torch.testing.assert_close(loaded.critic.state_dict()[key], value)
    assert loaded.policy_config.options["renorm_warmup_steps"] == 20
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], expected)
    # predicting does not move the statistics
    actor_stats = {k: v.clone() for k, v in loaded.actor.state_dict().items() if "running" in k}
    loaded.predict(obs)
    for key, value in actor_stats.items():
        torch.testing.assert_close(loaded.actor.state_dict()[key], value)


@pytest.mark.slow
@pytest.mark.parametrize("algo", [TQC, CrossQ], ids=lambda a: a.__name__)
def test_learns_point_reach(algo):
    env = PointReachEnv()
    kwargs = dict(learning_rate=1e-3, gamma=0.95, batch_size=128, learning_starts=200,
                  policy_kwargs=dict(net_arch=[64, 64]))
    if algo is TQC:
        kwargs.update(tau=0.05)
    else:  # an actor update per critic update: with sb3-contrib's 3, alpha decays too slowly for 4,000 steps
        kwargs.update(policy_delay=1)
        kwargs["policy_kwargs"]["renorm_warmup_steps"] = 1000
    model = algo("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, **kwargs)
    model.learn(3000)
    eval_env = PointReachEnv()
    eval_env.reset(seed=123)
    _, _, success = evaluate_policy(model, eval_env, n_eval_episodes=50, return_success_rate=True)
    assert success >= 0.9
