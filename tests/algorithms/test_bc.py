"""The behaviour-cloning loss with the Q-filter (Nair et al. 2018) on hand-made batches, in DDPG, TD3, SAC and TQC,
and its settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import herl
from herl.algorithms.bc import bc_loss
from herl.buffers.samples import DictReplayBufferSamples
from herl.envs import PointReachEnv
from herl.errors import ConfigError

ACTIONS = torch.tensor([[0.5, 0.0], [0.0, 0.0], [1.0, 1.0], [0.2, -0.2]])
DEMO_ACTIONS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.2, 0.2]])
MASK = torch.tensor([False, True, True, True])


def test_bc_loss_is_the_mean_over_demo_rows_of_the_squared_distance():
    # squared distances per row: 0.25 (not a demo row), 1, 1, 0.16; mean over the 3 demo rows
    assert bc_loss(ACTIONS, DEMO_ACTIONS, MASK).item() == pytest.approx((1 + 1 + 0.16) / 3)


def test_q_filter_keeps_the_demo_rows_whose_action_the_critic_prefers():
    q_demo = torch.tensor([[5.0], [1.0], [0.0], [2.0]])
    q_policy = torch.tensor([[0.0], [2.0], [-1.0], [2.0]])  # row 1: the policy's is better; row 3: a tie, not kept
    actions = ACTIONS.clone().requires_grad_(True)
    loss = bc_loss(actions, DEMO_ACTIONS, MASK, q_demo=q_demo, q_policy=q_policy)
    assert loss.item() == pytest.approx(1 / 3)  # row 2 only (row 0 is no demo), still divided by the 3 demo rows
    loss.backward()
    expected = torch.zeros(4, 2)
    expected[2] = 2 * (ACTIONS[2] - DEMO_ACTIONS[2]) / 3
    torch.testing.assert_close(actions.grad, expected)
    assert bc_loss(ACTIONS, DEMO_ACTIONS, torch.zeros(4, dtype=torch.bool)).item() == 0.0
    with pytest.raises(ValueError, match="demonstrations"):
        bc_loss(ACTIONS, DEMO_ACTIONS, None)


def hand_made_batch(env: PointReachEnv, n: int = 6) -> DictReplayBufferSamples:
    rng = np.random.default_rng(0)
    space = env.observation_space

    def obs() -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(np.stack([space[k].sample() for _ in range(n)])) for k in space.spaces}

    actions = torch.as_tensor(rng.uniform(-1, 1, (n, 2)), dtype=torch.float32)
    mask = torch.arange(n) >= n // 2
    return DictReplayBufferSamples(obs(), actions, obs(), torch.zeros(n, 1), -torch.ones(n, 1), demo_mask=mask)


@pytest.mark.parametrize("cls", [herl.DDPG, herl.TD3, herl.SAC, herl.TQC])
@pytest.mark.parametrize("q_filter", [True, False])
def test_each_algorithm_adds_the_bc_loss_it_should(cls, q_filter):
    """The update's bc_loss is the hand-computed one: the deterministic action (SAC's family: tanh of the mean) against
    the demo action, filtered by the critic the actor loss uses (TD3: the first; SAC: the minimum; TQC: the atoms'
    mean)."""
    env = PointReachEnv()
    env.observation_space.seed(0)
    kwargs = dict(policy_delay=1) if cls is herl.TD3 else {}
    model = cls("MultiInputPolicy", observation_space=env.observation_space, action_space=env.action_space,
                bc_loss_weight=0.5, q_filter=q_filter, normalize_observations=False, seed=0,
                policy_kwargs=dict(net_arch=[16]), **kwargs)
    batch = hand_made_batch(env)
    x = model.encoder.flatten(batch.observations)
    with torch.no_grad():
        if isinstance(model, herl.SAC):
            actions = model.actor(x, None)[0]
            q = model.critic(torch.cat([torch.cat([x, x]), torch.cat([batch.actions, actions])], dim=1))
            q = q.mean(dim=(0, 2)) if isinstance(model, herl.TQC) else q.amin(0).reshape(-1)
        else:
            actions = model.actor(x)
            q = model.critic(torch.cat([torch.cat([x, x]), torch.cat([batch.actions, actions])], dim=1))[0].reshape(-1)
    n = len(actions)
    keep = batch.demo_mask & (q[:n] > q[n:]) if q_filter else batch.demo_mask
    expected = ((actions - batch.actions).square().sum(dim=1) * keep).sum() / batch.demo_mask.sum()
    model._update(batch)
    assert model._train_info["bc_loss"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_settings_are_checked():
    env = PointReachEnv()
    for value in (-0.1, float("nan"), float("inf"), "1"):
        with pytest.raises(ConfigError, match="bc_loss_weight"):
            herl.SAC("MultiInputPolicy", env, bc_loss_weight=value)
    with pytest.raises(ConfigError, match="q_filter"):
        herl.TD3("MultiInputPolicy", env, q_filter=1)
    with pytest.raises(ConfigError, match="holds no demonstrations.*demonstrations="):
        herl.TQC("MultiInputPolicy", env, bc_loss_weight=1.0)
    with pytest.raises(ConfigError, match="CrossQ has no behaviour-cloning loss"):
        herl.CrossQ("MultiInputPolicy", env, bc_loss_weight=1.0)
    with pytest.raises(TypeError, match="bc_loss_weight"):
        herl.DQN("MultiInputPolicy", herl.envs.BitFlippingEnv(n_bits=4), bc_loss_weight=1.0)
    assert herl.SAC("MultiInputPolicy", env, bc_loss_weight=0.0).config.q_filter is True  # the defaults: off, filtered


def test_a_short_learn_with_demonstrations_is_seeded():
    """TQC + HER with PointReach demonstrations: learns with the BC loss logged, and the same seed gives the same
    weights."""
    from herl.buffers import HerReplayBuffer
    from herl.demos import generate_expert_traj

    def expert(obs):
        return np.clip(10.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)

    demos = generate_expert_traj(expert, None, PointReachEnv(), n_episodes=3, seed=0)

    def trained() -> herl.TQC:
        model = herl.TQC("MultiInputPolicy", PointReachEnv(), replay_buffer_class=HerReplayBuffer,
                         replay_buffer_kwargs=dict(demonstrations=demos, demo_batch_ratio=0.25), bc_loss_weight=1.0,
                         learning_starts=60, batch_size=16, policy_kwargs=dict(net_arch=[16], n_quantiles=5), seed=3)
        return model.learn(160)

    a, b = trained(), trained()
    info = a.train_info()
    assert np.isfinite(info["train/bc_loss"]) and info["train/bc_loss"] >= 0
    assert a.replay_buffer.n_demo_transitions == len(demos) and len(a.replay_buffer) == 160
    for name, state in a.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                assert torch.equal(tensor, b.get_parameters()[name][key]), f"{name}.{key}"
