"""herl's TQC update against sb3-contrib's, on identical weights and an identical batch: the check that tells a
bug in herl's TQC from a difference of recipe. Both libraries' networks read every observation entry, in the same
(sorted) order, so the weights copy over as they are.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

sb3_contrib = pytest.importorskip("sb3_contrib")

from stable_baselines3.common.logger import configure  # noqa: E402
from stable_baselines3.common.type_aliases import DictReplayBufferSamples  # noqa: E402

from herl import TQC  # noqa: E402
from herl.envs import PointReachEnv  # noqa: E402
from herl.nn.mlp import MLP  # noqa: E402

HIDDEN, N_QUANTILES, BATCH = [32, 32], 5, 64
KWARGS = dict(learning_rate=1e-3, gamma=0.9, tau=0.05, top_quantiles_to_drop_per_net=1, ent_coef=1e-9,
              learning_starts=0, batch_size=BATCH)


def models():
    env = PointReachEnv()
    theirs = sb3_contrib.TQC("MultiInputPolicy", env, seed=0, device="cpu",
                             policy_kwargs=dict(net_arch=HIDDEN, n_quantiles=N_QUANTILES, n_critics=2), **KWARGS)
    theirs.set_logger(configure(None, []))
    ours = TQC("MultiInputPolicy", env, seed=0, device="cpu", normalize_observations=False,
               policy_kwargs=dict(net_arch=HIDDEN, n_quantiles=N_QUANTILES, n_critics=2), **KWARGS)
    # both read achieved_goal, desired_goal, observation (sorted keys), [action]
    space = env.observation_space
    n_inputs = sum(space[k].shape[0] for k in space.spaces)
    assert ours.encoder.keys == tuple(sorted(space.spaces))
    with torch.no_grad():
        for member, net in enumerate(theirs.critic.q_networks):
            linears = [m for m in net if isinstance(m, torch.nn.Linear)]
            mlp = MLP(n_inputs + 2, N_QUANTILES, HIDDEN)
            for mine, their in zip(mlp.layers, linears):
                mine.weight.copy_(their.weight)
                mine.bias.copy_(their.bias)
            ours.critic.load_member_(member, mlp)
        theirs.critic_target.load_state_dict(theirs.critic.state_dict())
        ours.critic_target.load_state_dict(ours.critic.state_dict())
        linears = [m for m in theirs.actor.latent_pi if isinstance(m, torch.nn.Linear)]
        # a near-deterministic policy (std ~ e^-20): the two libraries' sampling noise then does not matter
        theirs.actor.log_std.weight.zero_()
        theirs.actor.log_std.bias.fill_(-25.0)
        layers = ours.actor.net.layers
        layers[0].weight.copy_(linears[0].weight)
        layers[0].bias.copy_(linears[0].bias)
        layers[1].weight.copy_(linears[1].weight)
        layers[1].bias.copy_(linears[1].bias)
        layers[2].weight.copy_(torch.cat([theirs.actor.mu.weight, theirs.actor.log_std.weight]))
        layers[2].bias.copy_(torch.cat([theirs.actor.mu.bias, theirs.actor.log_std.bias]))
    return theirs, ours


def batch(seed: int = 0):
    rng = np.random.default_rng(seed)

    def obs():
        return {"achieved_goal": torch.tensor(rng.uniform(-1, 1, (BATCH, 2)), dtype=torch.float32), "desired_goal": torch.tensor(rng.uniform(-1, 1, (BATCH, 2)), dtype=torch.float32),
                "observation": torch.tensor(rng.uniform(-1, 1, (BATCH, 4)), dtype=torch.float32)}

    return DictReplayBufferSamples(obs(), torch.tensor(rng.uniform(-1, 1, (BATCH, 2)), dtype=torch.float32), obs(),
                                   torch.tensor(rng.random((BATCH, 1)) < 0.1, dtype=torch.float32),
                                   -torch.tensor(rng.random((BATCH, 1)) < 0.7, dtype=torch.float32), None)


def their_update(model, data) -> None:
    model.replay_buffer.sample = lambda *args, **kwargs: data
    model.train(gradient_steps=1, batch_size=BATCH)


def quantiles(theirs, ours, data):
    with torch.no_grad():
        z_theirs = theirs.critic(data.observations, data.actions)  # (batch, critics, quantiles)
        x = ours.encoder.flatten(data.observations)
        z_ours = ours.critic(torch.cat([x, data.actions], dim=1)).transpose(0, 1)
    return z_theirs, z_ours


def test_same_weights_same_outputs():
    theirs, ours = models()
    data = batch(1)
    torch.testing.assert_close(*quantiles(theirs, ours, data))
    with torch.no_grad():
        a_theirs = theirs.actor(data.observations, deterministic=True)
        a_ours = ours._act(ours.encoder.flatten(data.observations), deterministic=True)
    torch.testing.assert_close(a_theirs, a_ours)


def test_critic_update_matches():
    theirs, ours = models()
    for step in range(3):  # critics and target critics agree after every update
        data = batch(step)
        their_update(theirs, data)
        ours._update(data)
        check = batch(100 + step)
        torch.testing.assert_close(*quantiles(theirs, ours, check), rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            t_theirs = theirs.critic_target(check.observations, check.actions)
            t_ours = ours.critic_target(torch.cat([ours.encoder.flatten(check.observations), check.actions], 1))
        torch.testing.assert_close(t_theirs, t_ours.transpose(0, 1), rtol=1e-4, atol=1e-5)


def test_actor_update_matches():
    # sb3-contrib steps the critics before the actor's loss, herl computes both from the same critics (one
    # backward pass): with sb3-contrib's critic step left out the actor's steps must agree
    theirs, ours = models()
    theirs.critic.optimizer.step = lambda *args, **kwargs: None
    for step in range(3):
        data = batch(step)
        their_update(theirs, data)
        with torch.no_grad():
            critic_before = [p.clone() for p in ours.critic.parameters()]
        ours._update(data)
        with torch.no_grad():  # put back herl's critic step, as sb3-contrib's did not move
            for p, before in zip(ours.critic.parameters(), critic_before):
                p.copy_(before)
        check = batch(100 + step)
        with torch.no_grad():
            a_theirs = theirs.actor(check.observations, deterministic=True)
            a_ours = ours._act(ours.encoder.flatten(check.observations), deterministic=True)
        torch.testing.assert_close(a_theirs, a_ours, rtol=1e-4, atol=1e-5)


class Fixed(torch.nn.Module):
    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.out = out

    def forward(self, x):
        return self.out


def test_squash_eps_gives_sb3s_log_probability():
    from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution

    from herl.nn.policies import SquashedGaussianActor

    gen = torch.Generator().manual_seed(0)
    mean, log_std = 4 * torch.randn(256, 3, generator=gen), torch.rand(256, 3, generator=gen) * 3 - 1
    noise = torch.randn(256, 3, generator=gen)
    pre_tanh = mean + log_std.exp() * noise
    dist = SquashedDiagGaussianDistribution(3).proba_distribution(mean, log_std)
    theirs = dist.log_prob(torch.tanh(pre_tanh), gaussian_actions=pre_tanh)
    sb3_like = SquashedGaussianActor(1, 3, [], net=Fixed(torch.cat([mean, log_std], 1)), squash_eps=1e-6)
    exact = SquashedGaussianActor(1, 3, [], net=Fixed(torch.cat([mean, log_std], 1)))
    _, lp_sb3_like = sb3_like(torch.zeros(256, 1), noise)
    _, lp_exact = exact(torch.zeros(256, 1), noise)
    torch.testing.assert_close(lp_sb3_like.reshape(-1), theirs, rtol=1e-5, atol=1e-4)
    # the two forms part only where actions saturate: there the exact one is larger (the action less random)
    # (in float32, 1 - tanh(u)^2 + 1e-6 is off by more than 1e-3 relative beyond |u| ~ 4)
    saturated, moderate = (pre_tanh.abs() > 8).any(dim=1), (pre_tanh.abs() < 4).all(dim=1)
    assert saturated.any() and moderate.any()
    torch.testing.assert_close(lp_exact[moderate], lp_sb3_like[moderate], rtol=1e-3, atol=1e-2)
    assert torch.all(lp_exact[saturated] > lp_sb3_like[saturated] + 1.0)
