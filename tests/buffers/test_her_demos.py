"""Demonstrations in the HER buffer: their own store, never overwritten, relabeled as the rest, a fixed share of each
batch marked by ``demo_mask``, saved and loaded with the buffer (Nair et al. 2018)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from herl.buffers import HerReplayBuffer
from herl.demos import DatasetError, Demonstrations, generate_expert_traj
from herl.envs import PointReachEnv
from herl.errors import ConfigError, NonFiniteError

EPISODE = 10


def reach_expert(obs):
    """Closes 30 % of the distance to the goal a step: it never lands exactly on it, so relabeled goals are new."""
    return np.clip(3.0 * (obs["desired_goal"] - obs["achieved_goal"]), -1.0, 1.0).astype(np.float32)


@pytest.fixture(scope="module")
def demos() -> Demonstrations:
    return generate_expert_traj(reach_expert, None, PointReachEnv(max_episode_steps=EPISODE), n_episodes=4, seed=3)


def make_buffer(demos, size: int = 60, **kwargs) -> tuple[HerReplayBuffer, PointReachEnv]:
    env = PointReachEnv(max_episode_steps=EPISODE)
    kwargs.setdefault("demo_batch_ratio", 0.25)
    return HerReplayBuffer(size, env.observation_space, env.action_space, env=env, demonstrations=demos, seed=0,
                           max_episode_length=EPISODE, **kwargs), env


def fill(buffer: HerReplayBuffer, env: PointReachEnv, steps: int, seed: int = 0) -> None:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(obs, next_obs, action, reward, terminated=terminated, truncated=truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs


def demo_store(buffer: HerReplayBuffer) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in buffer.demo_storage.arrays().items()}


@pytest.mark.parametrize("layout", [dict(), dict(optimize_memory_usage=True), dict(storage_device="cpu")])
def test_demo_store_holds_the_episodes_and_a_full_buffer_never_overwrites_it(demos, layout):
    buffer, env = make_buffer(demos, **layout)
    assert buffer.n_demo_transitions == len(demos) == 4 * EPISODE
    stored = buffer.demo_storage.states["observation"][:, 0]
    rows = np.arange(len(demos)) + (np.repeat(np.arange(4), EPISODE) if layout.get("optimize_memory_usage") else 0)
    np.testing.assert_array_equal(np.asarray(stored)[rows], demos.observations["observation"])
    before = demo_store(buffer)
    fill(buffer, env, 5 * 60)  # the main store (60 rows) wraps around five times
    assert buffer.full and len(buffer) <= 60
    after = demo_store(buffer)
    for name, array in before.items():
        np.testing.assert_array_equal(after[name], array, err_msg=name)
    buffer.reset()
    assert len(buffer) == 0 and buffer.n_demo_transitions == len(demos)  # reset forgets the added transitions only


def test_demo_batch_ratio_sets_the_demo_rows_and_the_mask(demos):
    buffer, env = make_buffer(demos, demo_batch_ratio=0.3)
    fill(buffer, env, 30)
    demo_obs = {tuple(o) for o in demos.observations["observation"]}
    for batch_size, n_demo in ((10, 3), (64, 19), (1, 0), (100, 30)):
        batch = buffer.sample(batch_size)
        mask = batch.demo_mask.numpy()
        assert mask.shape == (batch_size,) and mask.sum() == n_demo == buffer.demo_rows(batch_size)
        from_demos = np.array([tuple(o) in demo_obs for o in batch.observations["observation"].numpy()])
        np.testing.assert_array_equal(from_demos, mask)  # the marked rows, and only they, are demonstrations


def test_demo_rows_are_relabeled_like_the_rest(demos):
    """With k=4, about 4/5 of the demo rows get a goal achieved later in their own demo episode, and its reward."""
    buffer, env = make_buffer(demos, demo_batch_ratio=0.5, n_sampled_goal=4)
    fill(buffer, env, 30)
    batch = buffer.sample(2000)
    mask = batch.demo_mask.numpy()
    desired = batch.observations["desired_goal"].numpy()[mask]
    original = {tuple(g) for g in demos.observations["desired_goal"]}
    achieved = {tuple(g) for g in demos.next_observations["achieved_goal"]}
    relabeled = np.array([tuple(g) not in original for g in desired])
    assert 0.75 < relabeled.mean() < 0.85
    assert all(tuple(g) in achieved for g in desired[relabeled])
    rewards = batch.rewards.numpy()[mask, 0]
    next_achieved = batch.next_observations["achieved_goal"].numpy()[mask]
    np.testing.assert_array_equal(rewards, env.compute_reward(next_achieved, desired, {}))


def test_no_demonstrations_keeps_sampling_as_before(demos):
    """The demo path changes nothing without demonstrations: same seed, same batches as a buffer built without it."""
    env = PointReachEnv(max_episode_steps=EPISODE)
    a = HerReplayBuffer(60, env.observation_space, env.action_space, env=env, seed=0)
    b = HerReplayBuffer(60, env.observation_space, env.action_space, env=env, seed=0, demo_batch_ratio=0.5)
    fill(a, env, 40)
    fill(b, env, 40)
    x, y = a.sample(32), b.sample(32)
    assert x.demo_mask is None and y.demo_mask is None
    for key in x.observations:
        np.testing.assert_array_equal(x.observations[key], y.observations[key])


def test_save_and_load_keep_the_demo_store_and_continue_identically(demos, tmp_path):
    buffer, env = make_buffer(demos)
    fill(buffer, env, 70)
    buffer.save(tmp_path / "buffer.zip")
    loaded = HerReplayBuffer.load(tmp_path / "buffer.zip", env=env)
    assert loaded.n_demo_transitions == len(demos) and loaded.demo_batch_ratio == 0.25
    for name, array in demo_store(buffer).items():
        np.testing.assert_array_equal(demo_store(loaded)[name], array, err_msg=name)
    for _ in range(3):
        x, y = buffer.sample(16), loaded.sample(16)
        np.testing.assert_array_equal(x.demo_mask, y.demo_mask)
        for key in x.observations:
            np.testing.assert_array_equal(x.observations[key], y.observations[key])
        np.testing.assert_array_equal(x.rewards, y.rewards)


def test_demonstrations_from_a_dataset_folder(demos, tmp_path):
    pytest.importorskip("minari")
    from herl.demos import save_minari

    save_minari(demos, tmp_path / "demos")
    buffer, _ = make_buffer(str(tmp_path / "demos"))
    assert buffer.n_demo_transitions == len(demos)
    with pytest.raises(DatasetError, match="no dataset at"):
        make_buffer(str(tmp_path / "missing"))


def test_bad_demonstrations_and_settings_are_refused(demos):
    with pytest.raises(DatasetError, match=r"'achieved_goal' differs.*\(2,\).*\(3,\)"):
        env = PointReachEnv(dim=3, max_episode_steps=EPISODE)
        HerReplayBuffer(60, env.observation_space, env.action_space, env=env, demonstrations=demos)
    no_goals = dataclasses.replace(
        demos, observations={"observation": demos.observations["observation"]},
        next_observations={"observation": demos.next_observations["observation"]},
        observation_space=gym.spaces.Dict({"observation": demos.observation_space["observation"]}))
    with pytest.raises(DatasetError, match=r"lack the key\(s\) \['achieved_goal', 'desired_goal'\].*goal keys"):
        make_buffer(no_goals)
    empty = dataclasses.replace(demos, observations={k: v[:0] for k, v in demos.observations.items()},
                                next_observations={k: v[:0] for k, v in demos.next_observations.items()},
                                actions=demos.actions[:0], rewards=demos.rewards[:0],
                                terminations=demos.terminations[:0], truncations=demos.truncations[:0],
                                episode_starts=demos.episode_starts[:0])
    with pytest.raises(DatasetError, match="hold no steps"):
        make_buffer(empty)
    bad = dict(demos.observations, observation=demos.observations["observation"].copy())
    bad["observation"][7, 0] = np.nan
    with pytest.raises(NonFiniteError, match="'observation' holds NaN.*step 7"):
        make_buffer(dataclasses.replace(demos, observations=bad))
    for ratio in (1.0, -0.1, float("nan"), "0.5"):
        with pytest.raises(ConfigError, match="demo_batch_ratio"):
            make_buffer(demos, demo_batch_ratio=ratio)
    for setting in (dict(online_sampling=False), dict(prioritized=True), dict(copy_info_dict=True)):
        with pytest.raises(ValueError, match="cannot be combined with"):
            make_buffer(demos, **setting)
    with pytest.raises(TypeError, match="Demonstrations, a dataset folder"):
        make_buffer(42)
