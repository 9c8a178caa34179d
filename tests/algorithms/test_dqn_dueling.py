"""Dueling DQN (``policy_kwargs=dict(dueling=True)``; Stable-Baselines' DQN default, so SB2's ``HER(..., DQN)``
gets it): the Q-values' form, learning, files, export, and where the setting is taken or refused."""

from __future__ import annotations

import pytest
import torch

from herl import DQN, SAC, HerReplayBuffer, evaluate_policy
from herl.compat.sb2 import HER
from herl.envs import BitFlippingEnv, PointReachEnv
from herl.nn.policies import DuelingQNetwork
from herl.run.config import build_config
from herl.run.errors import CLIError


def test_q_values_are_value_plus_centred_advantages():
    net = DuelingQNetwork(6, 4, [16, 16], generator=torch.Generator().manual_seed(0))
    x = torch.randn(10, 6)
    value, advantage = net.value(x), net.advantage(x)
    q = net(x)
    assert q.shape == (10, 4)
    torch.testing.assert_close(q, value + advantage - advantage.mean(dim=1, keepdim=True))
    torch.testing.assert_close(q.mean(dim=1, keepdim=True), value)  # the advantages are centred on V
    # the streams are separate networks from the observations (Stable-Baselines' form), not two heads on one trunk
    assert net.value.layers[0].in_features == net.advantage.layers[0].in_features == 6


def test_dueling_dqn_learns_bit_flipping_and_saves_and_loads(tmp_path):
    env = BitFlippingEnv(6, max_steps=6)
    model = DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, seed=0, learning_starts=200,
                learning_rate=1e-3, batch_size=64, train_freq=1, target_update_interval=200, exploration_fraction=0.2,
                gamma=0.95, policy_kwargs=dict(dueling=True, net_arch=[64, 64]))
    assert isinstance(model.q_net, DuelingQNetwork) and isinstance(model.q_net_target, DuelingQNetwork)
    model.learn(3000)
    *_, success = evaluate_policy(model, BitFlippingEnv(6, max_steps=6), n_eval_episodes=30,
                                  return_success_rate=True, seed=1)
    assert success >= 0.9
    model.save(tmp_path / "dueling")
    loaded = DQN.load(tmp_path / "dueling")
    assert loaded.policy_config.options["dueling"] is True
    obs, _ = env.reset(seed=2)
    assert loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]
    for (name, p), q in zip(model.q_net.named_parameters(), loaded.q_net.parameters()):
        assert torch.equal(p, q), name


def test_dqn_is_not_dueling_by_default_and_the_setting_is_a_bool():
    assert not isinstance(DQN("MultiInputPolicy", BitFlippingEnv(4)).q_net, DuelingQNetwork)
    with pytest.raises(TypeError, match="dueling must be True or False"):
        DQN("MultiInputPolicy", BitFlippingEnv(4), policy_kwargs=dict(dueling="yes"))
    with pytest.raises(TypeError, match="unsupported policy_kwargs.*dueling"):
        SAC("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(dueling=True))


def test_sb2_her_dqn_is_dueling_unless_told_otherwise():
    env = BitFlippingEnv(4)
    assert isinstance(HER("MlpPolicy", env, DQN).model.q_net, DuelingQNetwork)
    assert not isinstance(HER("MlpPolicy", env, DQN, policy_kwargs=dict(dueling=False)).model.q_net, DuelingQNetwork)
    ln = HER("LnMlpPolicy", env, DQN).model.q_net
    assert isinstance(ln, DuelingQNetwork) and ln.value.norms is not None and ln.advantage.norms is not None


def test_policy_dueling_from_the_command_line():
    def config(algo: str, value: object):
        return build_config(algo=algo, env="X-v0", seed=0, goal_env=True, preset=None,
                            layers=[("--set", {"policy.dueling": value})])

    assert config("dqn", True).policy.to_policy_kwargs()["dueling"] is True
    with pytest.raises(CLIError, match="policy.dueling in --set is read by DQN only, not sac"):
        config("sac", True)


def test_onnx_of_a_dueling_dqn_equals_predict(tmp_path):
    pytest.importorskip("onnxruntime")
    from herl.export import check_onnx

    model = DQN("MultiInputPolicy", BitFlippingEnv(5), seed=0, policy_kwargs=dict(dueling=True, net_arch=[32, 32]))
    path = model.export_onnx(tmp_path / "policy.onnx")
    assert check_onnx(model, path, n_observations=500) == 0.0
