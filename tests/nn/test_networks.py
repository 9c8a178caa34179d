"""The batched twin critic computes what two MLPs compute; the normalizer's statistics are right."""

from __future__ import annotations

import pytest
import torch

from herl.nn import MLP, EnsembleMLP, RunningNormalizer, SquashedGaussianActor, gemm


def test_ensemble_equals_separate_mlps():
    g = torch.Generator().manual_seed(0)
    ensemble = EnsembleMLP(7, 1, [16, 8], n_members=2, generator=g)
    members = [MLP(7, 1, [16, 8], generator=g) for _ in range(2)]
    for i, mlp in enumerate(members):
        ensemble.load_member_(i, mlp)
    x = torch.randn(5, 7)
    out = ensemble(x)
    assert out.shape == (2, 5, 1)
    for i, mlp in enumerate(members):
        torch.testing.assert_close(out[i], mlp(x))


def test_detached_params_pass_gradients_to_inputs_only():
    ensemble = EnsembleMLP(3, 1, [4], n_members=2)
    x = torch.randn(6, 3, requires_grad=True)
    ensemble(x, detach_params=True).sum().backward()
    assert x.grad is not None
    assert all(p.grad is None for p in ensemble.parameters())


def test_normalizer_matches_batch_statistics_and_clips():
    norm = RunningNormalizer(2, clip_range=3.0)
    data = torch.randn(1000, 2) * torch.tensor([2.0, 0.5]) + torch.tensor([1.0, -3.0])
    norm.update(data[:400])
    norm.update(data[400:])
    torch.testing.assert_close(norm.mean, data.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(norm.std, data.std(0, unbiased=False), atol=1e-5, rtol=0)
    assert norm(torch.tensor([[1e6, -1e6]])).tolist() == [[3.0, -3.0]]
    constant = RunningNormalizer(1)
    constant.update(torch.ones(10, 1))
    assert torch.isfinite(constant(torch.ones(1, 1))).all()  # std floored at eps, no division by ~0


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(4, 2, [8])
    x, noise = torch.randn(64, 4), torch.randn(64, 2)
    actions, log_prob = actor(x, noise)
    mean, log_std = actor.net(x).chunk(2, -1)
    dist = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())
    u = mean + log_std.clamp(-20, 2).exp() * noise
    expected = (dist.log_prob(u) - torch.log1p(-torch.tanh(u).square())).sum(-1, keepdim=True)
    torch.testing.assert_close(actions, torch.tanh(u))
    torch.testing.assert_close(log_prob, expected, atol=1e-4, rtol=1e-4)


def test_an_ensemble_without_hidden_layers_is_one_linear_map_per_member():
    """SB3 takes ``net_arch=[]`` (linear networks); the critics' ensemble does too."""
    g = torch.Generator().manual_seed(0)
    ens = EnsembleMLP(5, 3, [], n_members=2, generator=g)
    x = torch.randn(7, 5, generator=g)
    out = ens(x)
    assert out.shape == (2, 7, 3)
    w, b = ens.weights[0].view(5, 2, 3), ens.biases[0].view(2, 3)
    for m in range(2):
        torch.testing.assert_close(out[m], x @ w[:, m] + b[m])
    out.sum().backward()
    assert ens.weights[0].grad is not None


def test_every_algorithm_trains_saves_and_loads_with_linear_networks(tmp_path):
    from herl import DDPG, DQN, SAC, TD3, TQC, CrossQ

    for cls, env in [(SAC, "Pendulum-v1"), (TD3, "Pendulum-v1"), (DDPG, "Pendulum-v1"), (TQC, "Pendulum-v1"),
                     (CrossQ, "Pendulum-v1"), (DQN, "CartPole-v1")]:
        for arch in ([], dict(pi=[4], qf=[])):
            if cls is DQN and isinstance(arch, dict):
                continue
            model = cls("MlpPolicy", env, policy_kwargs=dict(net_arch=arch), learning_starts=20, batch_size=8, seed=0)
            model.learn(40)
            model.save(tmp_path / "linear")
            loaded = cls.load(tmp_path / "linear.zip", env=env)
            obs = loaded.observation_space.sample()
            assert (loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]).all()
            loaded.learn(10, reset_num_timesteps=False)



def boolean_tensors_in_compiled_code(net, x: torch.Tensor, **kwargs) -> tuple[int, tuple]:
    """Compile ``net`` with inductor, run it forward and backward, and count the generated kernels' boolean tensor
    arguments; with the outputs and input gradients."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(net)
    x = x.detach().clone().requires_grad_(True)

    def run():
        out = compiled(x, **kwargs)
        out.square().sum().backward()
        return out.detach()

    out, code = run_and_get_code(run)
    return sum(source.count("bool*") for source in code), (out, x.grad)


@pytest.mark.slow
def test_compiled_relu_networks_keep_no_boolean_masks(monkeypatch):
    """Inductor's CPU kernels store and load boolean tensors element by element (PyTorch 2.13): a ReLU whose mask
    went from the forward to the backward pass ran 10x slower compiled than eager. The networks' ReLUs leave no
    boolean tensor in the compiled code, with the values and gradients of eager ReLUs; torch.relu leaves some in the
    same network (the critics' pass for the actor's loss, their weights held constant)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 7)
    for net, kwargs in [(EnsembleMLP(7, 3, [16, 16], n_members=2, generator=gen), {"detach_params": True}),
                        (EnsembleMLP(7, 3, [16, 16], n_members=2, layer_norm=True, generator=gen), {"detach_params": True}),
                        (MLP(7, 3, [16, 16], generator=gen), {})]:
        booleans, (out, grad) = boolean_tensors_in_compiled_code(net, x, **kwargs)
        assert booleans == 0, (type(net).__name__, kwargs)
        eager_x = x.clone().requires_grad_(True)
        eager_out = net(eager_x, **kwargs)
        eager_out.square().sum().backward()
        torch.testing.assert_close(out, eager_out.detach())
        torch.testing.assert_close(grad, eager_x.grad)
    monkeypatch.setattr(gemm, "compilable_relu", torch.relu)
    assert boolean_tensors_in_compiled_code(EnsembleMLP(7, 3, [16, 16], generator=gen), x, detach_params=True)[0] > 0
