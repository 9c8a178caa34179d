"""BatchedTrainer: every algorithm learns on batched goal envs through the device HER buffer, and resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import herl
from herl.batched import BatchedBitFlipping, BatchedPointReach, BatchedPush, BatchedTrainer
from herl.training.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

BOX_ALGOS = {
    "sac": lambda: (herl.SAC, {}),
    "tqc": lambda: (herl.TQC, {"policy_kwargs": dict(net_arch=[32, 32], n_quantiles=5)}),
    "td3": lambda: (herl.TD3, {"action_noise": NormalActionNoise(np.zeros(2), 0.1 * np.ones(2))}),
    "ddpg": lambda: (herl.DDPG, {"action_noise": NormalActionNoise(np.zeros(2), 0.1 * np.ones(2))}),
    "crossq": lambda: (herl.CrossQ, {"policy_kwargs": dict(net_arch=[32, 32])}),
}


def build(cls, env, **kwargs):
    kwargs = {"policy_kwargs": dict(net_arch=[32, 32]), "batch_size": 32, "learning_starts": 128,
              "buffer_size": 20_000, "seed": 0, "device": "cpu", **kwargs}
    return cls("MultiInputPolicy", observation_space=env.single_observation_space, action_space=env.single_action_space,
               **kwargs)


def weights(model) -> dict[str, torch.Tensor]:
    return {f"{name}/{k}": v.clone() for name, net in model.nets.items() for k, v in net.state_dict().items()}


@pytest.mark.parametrize("name", BOX_ALGOS)
def test_every_box_algorithm_trains_and_resumes_bit_identically(tmp_path, name):
    """save -> load -> train on gives the weights, buffer and envs of the run never interrupted (CPU, to the bit)."""
    cls, kwargs = BOX_ALGOS[name]()
    straight_env = BatchedPointReach(n_envs=16)
    straight = BatchedTrainer(build(cls, straight_env, **kwargs), straight_env, updates_per_step=1 / 4)
    straight.learn(800)

    env = BatchedPointReach(n_envs=16)
    first = BatchedTrainer(build(cls, env, **BOX_ALGOS[name]()[1]), env, updates_per_step=1 / 4)
    first.learn(400)
    first.save(tmp_path / "run")
    resumed = BatchedTrainer.load(tmp_path / "run", BatchedPointReach(n_envs=16))
    resumed.learn(800)

    assert resumed.model.num_timesteps == straight.model.num_timesteps == 800
    assert resumed.model._n_updates == straight.model._n_updates == (800 - 128) // 4 + 4  # rounds from step 128
    a, b = weights(straight.model), weights(resumed.model)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    for key, value in straight.obs.items():
        assert torch.equal(value, resumed.obs[key])
    batch_a, batch_b = straight.buffer.sample(32), resumed.buffer.sample(32)
    assert torch.equal(batch_a.rewards, batch_b.rewards)
    assert torch.equal(batch_a.observations["desired_goal"], batch_b.observations["desired_goal"])


def test_sac_learns_point_reach():
    """HER on batched envs solves PointReach: deterministic success over 200 fresh episodes."""
    env = BatchedPointReach(n_envs=128)
    model = build(herl.SAC, env, batch_size=256, learning_starts=1_024, learning_rate=1e-3, gamma=0.95, tau=0.05,
                  policy_kwargs=dict(net_arch=[64, 64]))
    trainer = BatchedTrainer(model, env, updates_per_step=1 / 2)
    before = trainer.evaluate(BatchedPointReach(n_envs=200))
    trainer.learn(6_144)
    after = trainer.evaluate(BatchedPointReach(n_envs=200))
    assert before < 0.2 and after >= 0.9, (before, after)


def test_dqn_on_batched_bit_flipping_with_episodes_of_different_lengths():
    env = BatchedBitFlipping(n_envs=32, n_bits=4)
    model = herl.DQN("MultiInputPolicy", observation_space=env.single_observation_space,
                     action_space=env.single_action_space, learning_starts=200, batch_size=64, buffer_size=10_000,
                     exploration_fraction=0.3, seed=0, device="cpu", policy_kwargs=dict(net_arch=[64]))
    trainer = BatchedTrainer(model, env, updates_per_step=1 / 4)
    trainer.learn(8_000)
    assert trainer.episodes > 8_000 / 4  # episodes end early on success, so there are many more than the time limit gives
    assert trainer.evaluate(BatchedBitFlipping(n_envs=100, n_bits=4)) >= 0.9


def test_update_count_follows_the_update_to_data_ratio():
    env = BatchedPointReach(n_envs=10)
    trainer = BatchedTrainer(build(herl.SAC, env, learning_starts=0), env, updates_per_step=0.15, collect_steps=3)
    trainer.learn(300)  # 10 rounds of 30 env steps: 4.5 updates owed each, the halves carried over
    assert trainer.model._n_updates == 45
    assert trainer.model.num_timesteps == 300


def test_refusals_name_the_fix(tmp_path):
    env = BatchedPointReach(n_envs=4)
    with pytest.raises(ValueError, match="single_observation_space"):
        BatchedTrainer(build(herl.SAC, BatchedPointReach(n_envs=4, dim=3)), env)
    with pytest.raises(TypeError, match="unknown settings"):
        BatchedTrainer(build(herl.SAC, env), env, utd=2)
    with pytest.raises(ValueError, match="Gaussian noise only"):
        noise = OrnsteinUhlenbeckActionNoise(np.zeros(2), 0.1 * np.ones(2))
        BatchedTrainer(build(herl.TD3, env, action_noise=noise, learning_starts=0), env).learn(8)
    with pytest.raises(TypeError, match="BatchedGoalEnv"):
        BatchedTrainer(build(herl.SAC, env), herl.envs.PointReachEnv())
    with pytest.raises(ValueError, match="env of its own"):
        BatchedTrainer(herl.SAC("MultiInputPolicy", herl.envs.PointReachEnv(), device="cpu"), env)
    trainer = BatchedTrainer(build(herl.SAC, env), env)
    trainer.save(tmp_path / "run")
    with pytest.raises(FileExistsError, match="new folder"):
        trainer.save(tmp_path / "run")
    with pytest.raises(ValueError, match="same env"):
        BatchedTrainer.load(tmp_path / "run", BatchedPointReach(n_envs=5))
    with pytest.raises(ValueError, match="own env"):
        trainer.evaluate()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_trains_and_resumes_on_cuda(tmp_path):
    """Envs, buffer and model on the GPU: training runs there, and a saved run continues as the run never stopped."""
    def trainer(device):
        env = BatchedPointReach(n_envs=64, device=device)
        return BatchedTrainer(build(herl.SAC, env, device=device), env, updates_per_step=1 / 8)

    straight = trainer("cuda").learn(2_048)
    first = trainer("cuda").learn(1_024)
    first.save(tmp_path / "run")
    resumed = BatchedTrainer.load(tmp_path / "run", BatchedPointReach(n_envs=64, device="cuda")).learn(2_048)
    assert resumed.model.device.type == "cuda" and resumed.buffer.device.type == "cuda"
    a, b = weights(straight.model), weights(resumed.model)
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
def test_sac_learns_batched_push_with_the_presets_settings():
    """HER's object-goal setting: the puck moves only once the pusher has learned to reach it. With the push_batched
    preset's settings, seeds 0-2 of `herl train` passed 0.9 between 128k and 141k env steps."""
    env = BatchedPush(n_envs=256)
    model = build(herl.SAC, env, batch_size=512, learning_starts=5_120, learning_rate=1e-3, gamma=0.95, tau=0.05,
                  buffer_size=250_000, policy_kwargs=dict(net_arch=[256, 256]))
    trainer = BatchedTrainer(model, env, updates_per_step=1 / 8)
    trainer.learn(179_200)
    assert trainer.evaluate(BatchedPush(n_envs=200)) >= 0.9
