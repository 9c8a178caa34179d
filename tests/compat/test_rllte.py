"""herl.compat.rllte.HerReplayStorage: rllte's documented behaviour, and that it samples what the engine samples."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from herl import HerReplayBuffer
from herl.compat.rllte import DictReplayBatch, HerReplayStorage
from herl.envs import BitFlippingEnv

# synthetic transitions: their rewards are not what the reward function gives, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::herl.envs.checks.GoalEnvWarning")

# A counting world: step t of episode e observes [t, e] and achieves goal t; the desired goal, -1,
# is never achieved, so relabeled transitions are recognisable and their goal tells its step.
BOX = spaces.Box(-np.inf, np.inf, (1,), np.float32)
OBS_SPACE = spaces.Dict(observation=spaces.Box(-np.inf, np.inf, (2,), np.float32), achieved_goal=BOX, desired_goal=BOX)
NO_GOAL = -1.0


def reward_fn(achieved_goal, desired_goal, info):
    return -np.abs(achieved_goal[:, 0] - desired_goal[:, 0]) - 0.5 * desired_goal[:, 0]  # asymmetric in the goals


def make(**kwargs):
    kwargs = {"storage_size": 2000, "batch_size": 256, "reward_fn": reward_fn, "seed": 0, **kwargs}
    return HerReplayStorage(OBS_SPACE, BOX, **kwargs)


def step_tensors(t, episode, n_envs=1):
    obs = {
        "observation": torch.tensor([[t, episode]] * n_envs, dtype=torch.float32),
        "achieved_goal": torch.full((n_envs, 1), float(t)),
        "desired_goal": torch.full((n_envs, 1), NO_GOAL),
    }
    next_obs = {**obs, "observation": obs["observation"] + torch.tensor([1.0, 0.0]), "achieved_goal": obs["achieved_goal"] + 1}
    return obs, next_obs


def add_episode(storage, length, episode=0, *, terminated_at_end=False, n_envs=1, infos=None):
    for t in range(length):
        obs, next_obs = step_tensors(t, episode, n_envs)
        last = t == length - 1
        storage.add(
            obs, torch.full((n_envs, 1), float(t)), torch.full((n_envs,), -1.0),
            torch.full((n_envs,), last and terminated_at_end), torch.full((n_envs,), last and not terminated_at_end),
            infos if infos is not None else {}, next_obs,
        )


def test_batches_are_float32_tensors_with_rlltes_fields_and_shapes():
    storage = make(batch_size=32)
    add_episode(storage, 5)
    batch = storage.sample()
    assert isinstance(batch, DictReplayBatch)
    assert batch._fields == ("observations", "actions", "rewards", "terminateds", "truncateds", "next_observations")
    assert {k: tuple(v.shape) for k, v in batch.observations.items()} == {
        "observation": (32, 2), "achieved_goal": (32, 1), "desired_goal": (32, 1)}
    assert batch.next_observations.keys() == batch.observations.keys()
    for tensor in (batch.actions, batch.rewards, batch.terminateds, batch.truncateds):
        assert tuple(tensor.shape) == (32, 1)
    tensors = [batch.actions, batch.rewards, batch.terminateds, batch.truncateds,
               *batch.observations.values(), *batch.next_observations.values()]
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
    assert len(storage) == 5
    storage.sample(step=123)  # rllte passes the global step


def test_termination_and_truncation_flags_come_back_separately():
    storage = make(batch_size=2000)
    add_episode(storage, 4, 0, terminated_at_end=True)
    add_episode(storage, 6, 1, terminated_at_end=False)
    batch = storage.sample()
    step, episode = batch.observations["observation"][:, 0], batch.observations["observation"][:, 1]
    torch.testing.assert_close(batch.terminateds[:, 0], ((episode == 0) & (step == 3)).float())
    torch.testing.assert_close(batch.truncateds[:, 0], ((episode == 1) & (step == 5)).float())


def test_relabeled_rewards_come_from_reward_fn_with_the_next_achieved_goal():
    storage = make(batch_size=2000)
    for episode in range(3):
        add_episode(storage, 8, episode)
    batch = storage.sample()
    achieved, desired = batch.next_observations["achieved_goal"].numpy(), batch.observations["desired_goal"].numpy()
    np.testing.assert_allclose(batch.rewards[:, 0].numpy(), np.where(desired[:, 0] == NO_GOAL, -1.0, reward_fn(achieved, desired, {})))
    torch.testing.assert_close(batch.next_observations["desired_goal"], batch.observations["desired_goal"])


def test_a_goal_env_serves_as_reward_fn():
    env = BitFlippingEnv(4, random_goal=True)
    storage = HerReplayStorage(env.observation_space, env.action_space, storage_size=500, batch_size=512, reward_fn=env, seed=0)
    obs, _ = env.reset(seed=0)
    as_tensors = lambda o: {k: torch.as_tensor(v)[None] for k, v in o.items()}  # noqa: E731
    for _ in range(60):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, info = env.step(action)
        storage.add(as_tensors(obs), torch.tensor([action]), torch.tensor([reward]), torch.tensor([terminated]),
                    torch.tensor([truncated]), info, as_tensors(next_obs))
        obs = env.reset()[0] if terminated or truncated else next_obs
    batch = storage.sample()
    achieved, desired = batch.next_observations["achieved_goal"].numpy(), batch.observations["desired_goal"].numpy()
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), env.compute_reward(achieved, desired, {}))
    # the env ends episodes on success, so relabeled transitions get their termination recomputed
    np.testing.assert_array_equal(batch.terminateds[:, 0].numpy(), env.compute_terminated(achieved, desired, {}))


@pytest.mark.parametrize("reward", [None, "lambda"])
def test_reward_fn_is_required_with_a_clear_error(reward):
    if reward is None:
        with pytest.raises(ValueError, match="needs reward_fn"):
            HerReplayStorage(OBS_SPACE, BOX)
    else:  # rllte's default, an identity; the error names the user's argument, not the engine's compute_reward
        with pytest.raises(ValueError, match="reward_fn failed on a batch of 2 goals") as caught:
            HerReplayStorage(OBS_SPACE, BOX, reward_fn=lambda x: x)
        assert "compute_reward" not in str(caught.value)
    with pytest.raises(TypeError, match="reward_fn must be"):
        HerReplayStorage(OBS_SPACE, BOX, reward_fn=3)


def test_a_reward_fn_that_is_not_vectorized_is_named_when_first_called_at_add():
    """With copy_info_dict the info entries are known at the first add, where the reward function is probed."""
    storage = make(copy_info_dict=True, reward_fn=lambda achieved_goal, desired_goal, info: -1.0)
    with pytest.raises(ValueError, match="reward_fn returned shape") as caught:
        add_episode(storage, 3, infos={"distance": np.ones(1)})
    assert "compute_reward" not in str(caught.value)


def test_flat_observations_and_unknown_strategies_are_refused():
    with pytest.raises(ValueError, match="Dict observation space"):
        HerReplayStorage(BOX, BOX, reward_fn=reward_fn)
    with pytest.raises(ValueError, match="goal_selection_strategy"):
        make(goal_selection_strategy="futur")


def test_update_accepts_anything_and_does_nothing():
    storage = make(batch_size=64)
    add_episode(storage, 5)
    before = storage.engine.rng.bit_generator.state
    assert storage.update() is None
    assert storage.update(1, torch.zeros(3), metrics={"loss": 1.0}) is None
    assert storage.engine.rng.bit_generator.state == before and len(storage) == 5


@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
def test_goals_follow_the_strategy(strategy):
    storage = make(goal_selection_strategy=strategy, batch_size=4000)
    length = 8
    for episode in range(5):
        add_episode(storage, length, episode)
    batch = storage.sample()
    step = batch.observations["observation"][:, 0]
    goal = batch.observations["desired_goal"][:, 0]
    relabeled = goal != NO_GOAL
    assert abs(relabeled.float().mean().item() - 4 / 5) < 0.03
    offset = goal[relabeled] - (step[relabeled] + 1)  # steps after the transition's own next state
    if strategy == "future":
        assert offset.min() == 0 and offset.max() == length - 1
    elif strategy == "final":
        assert torch.all(goal[relabeled] == length)
    else:
        assert offset.min() == -length + 1 and offset.max() == length - 1


def test_the_storage_samples_exactly_what_the_engine_samples():
    """Only a translation: same seed, same transitions, same goals and rewards as the engine used directly."""
    storage = make(seed=9, num_goals=4)
    engine = HerReplayBuffer(2000, OBS_SPACE, BOX, device="cpu", n_sampled_goal=4, compute_reward=reward_fn, seed=9)
    for episode in range(4):
        add_episode(storage, 10, episode)
        for t in range(10):
            obs, next_obs = step_tensors(t, episode)
            engine.add({k: v.numpy() for k, v in obs.items()}, {k: v.numpy() for k, v in next_obs.items()},
                       np.array([[t]], np.float32), np.array([-1.0]), terminated=[False], truncated=[t == 9])
    ours, direct = storage.sample(), engine.sample(256)
    torch.testing.assert_close(ours.observations["desired_goal"], direct.observations["desired_goal"])
    torch.testing.assert_close(ours.rewards, direct.rewards)


def test_parallel_environments_and_info_entries_reach_the_reward():
    seen = []

    def reward_with_info(achieved_goal, desired_goal, info):
        seen.append(info)
        return reward_fn(achieved_goal, desired_goal, info)

    storage = make(num_envs=2, copy_info_dict=True, reward_fn=reward_with_info)
    add_episode(storage, 6, n_envs=2, infos={"distance": np.array([0.5, 1.5])})
    assert len(storage) == 12
    storage.sample()
    assert set(seen[-1]) == {"distance"} and set(np.unique(seen[-1]["distance"])) <= {0.5, 1.5}


def test_reset_forgets_everything():
    storage = make()
    add_episode(storage, 5)
    storage.reset()
    assert len(storage) == 0


def test_a_device_resident_storage_samples_what_the_host_storage_samples():
    """storage_device keeps the data as torch tensors (on the CPU here); batches are the same."""
    host, device = make(seed=4), make(seed=4, storage_device="cpu")
    for episode in range(3):
        add_episode(host, 7, episode)
        add_episode(device, 7, episode)
    a, b = host.sample(), device.sample()
    for name in ("actions", "rewards", "terminateds", "truncateds"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name))
    for key in a.observations:
        torch.testing.assert_close(a.observations[key], b.observations[key])
        torch.testing.assert_close(a.next_observations[key], b.next_observations[key])
