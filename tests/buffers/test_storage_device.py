"""storage_device: the stored data as torch tensors gives the very same batches as NumPy storage."""

import numpy as np
import pytest
import torch

from herl import HerReplayBuffer, ReplayBuffer
from herl.envs import BitFlippingEnv, PointReachEnv


def rollout(env, buffer, steps, *, as_tensors=False, seed=0):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    convert = (lambda x: {k: torch.as_tensor(v) for k, v in x.items()}) if as_tensors else (lambda x: x)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(convert(obs), convert(next_obs), torch.as_tensor(action) if as_tensors else action, reward,
                   terminated=terminated, truncated=truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs


def assert_same_batches(a, b):
    for name in ("actions", "dones", "rewards"):
        torch.testing.assert_close(getattr(a, name).float(), getattr(b, name).float())
    for key in a.observations:
        torch.testing.assert_close(a.observations[key], b.observations[key])
        torch.testing.assert_close(a.next_observations[key], b.next_observations[key])


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("strategy", ["future", "final", "random"])
def test_torch_storage_samples_exactly_what_numpy_storage_samples(optimize, online, strategy):
    kwargs = dict(n_sampled_goal=4, goal_selection_strategy=strategy, optimize_memory_usage=optimize,
                  online_sampling=online, seed=3, device="cpu")
    env = BitFlippingEnv(6, random_goal=True)
    host = HerReplayBuffer(400, env.observation_space, env.action_space, env=env, **kwargs)
    dev = HerReplayBuffer(400, env.observation_space, env.action_space, env=env, storage_device="cpu", **kwargs)
    rollout(BitFlippingEnv(6, random_goal=True), host, 250)
    rollout(BitFlippingEnv(6, random_goal=True), dev, 250, as_tensors=True)
    assert isinstance(dev.storage._blocks[next(iter(dev.storage._blocks))], torch.Tensor)
    for _ in range(3):
        assert_same_batches(host.sample(64), dev.sample(64))


def test_torch_storage_saves_and_loads(tmp_path):
    env = PointReachEnv()
    dev = HerReplayBuffer(500, env.observation_space, env.action_space, env=env, storage_device="cpu", seed=1, device="cpu")
    rollout(PointReachEnv(), dev, 120)
    dev.save(tmp_path / "b.zip")
    loaded = HerReplayBuffer.load(tmp_path / "b.zip", env=env, device="cpu")
    assert loaded.storage_device == torch.device("cpu")
    assert_same_batches(dev.sample(32), loaded.sample(32))


def test_plain_replay_and_per_on_torch_storage():
    env = PointReachEnv()
    flat = env.observation_space["observation"]
    host = ReplayBuffer(300, flat, env.action_space, prioritized=True, seed=0, device="cpu")
    dev = ReplayBuffer(300, flat, env.action_space, prioritized=True, seed=0, device="cpu", storage_device="cpu")
    rng = np.random.default_rng(0)
    for t in range(200):
        o, n, a = rng.random((1, 4)), rng.random((1, 4)), rng.uniform(-1, 1, (1, 2))
        host.add(o, n, a, np.zeros(1), terminated=np.array([t % 50 == 49]))
        dev.add(torch.as_tensor(o), torch.as_tensor(n), torch.as_tensor(a), np.zeros(1), terminated=np.array([t % 50 == 49]))
    a, b = host.sample(40), dev.sample(40)
    torch.testing.assert_close(a.observations, b.observations)
    torch.testing.assert_close(a.weights, b.weights)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_storage_gathers_on_the_device():
    env = BitFlippingEnv(5)
    buffer = HerReplayBuffer(200, env.observation_space, env.action_space, env=env, storage_device="cuda", device="cuda", seed=0)
    rollout(BitFlippingEnv(5), buffer, 60)
    batch = buffer.sample(16)
    assert batch.observations["desired_goal"].device.type == "cuda"
