"""ShardedVectorEnv: envs split over processes step as a SyncVectorEnv of the same envs does, to the bit."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import herl.envs  # noqa: F401  (registers herl/PointReach-v0)
from herl.envs.sharded import ShardedVectorEnv
from herl.run.envs import env_processes, make_training_env, restore_envs, snapshot_envs


def _point_reach(steps: int = 4):
    return lambda: gym.make("herl/PointReach-v0", max_episode_steps=steps)


def _assert_same_obs(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def _assert_same_infos(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key == "final_obs":
            for x, y in zip(a[key], b[key]):
                assert (x is None) == (y is None)
                if x is not None:
                    _assert_same_obs(x, y)
        elif isinstance(a[key], dict):
            _assert_same_infos(a[key], b[key])
        else:
            assert np.array_equal(a[key], b[key]) and a[key].dtype == b[key].dtype, key


@pytest.mark.parametrize("n_processes", [1, 2, 3, 9])
def test_steps_as_a_sync_vector_env_whatever_the_processes(n_processes: int) -> None:
    fns = [_point_reach(steps=3 + i % 3) for i in range(5)]  # episodes end at different steps: autoresets differ
    sync = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    sharded = ShardedVectorEnv(fns, n_processes)
    try:
        assert sharded.n_processes == min(n_processes, 5)
        assert sharded.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert sharded.observation_space == sync.observation_space and sharded.action_space == sync.action_space
        obs_a, infos_a = sync.reset(seed=7)
        obs_b, infos_b = sharded.reset(seed=7)
        _assert_same_obs(obs_a, obs_b)
        _assert_same_infos(infos_a, infos_b)
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(12):
            actions = rng.uniform(-1, 1, (5, 2)).astype(np.float32)
            a, b = sync.step(actions), sharded.step(actions)
            _assert_same_obs(a[0], b[0])
            for x, y in zip(a[1:4], b[1:4]):
                assert x.dtype == y.dtype and np.array_equal(x, y)
            _assert_same_infos(a[4], b[4])
            ended += int(np.logical_or(a[2], a[3]).sum())
        assert ended >= 10  # the comparison covered final_obs and final_info
    finally:
        sync.close()
        sharded.close()


def test_reset_takes_a_seed_per_env_and_refuses_a_wrong_count() -> None:
    fns = [_point_reach() for _ in range(3)]
    sync = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    with ShardedVectorEnv(fns, 2) as sharded:
        _assert_same_obs(sync.reset(seed=[5, 1, 9])[0], sharded.reset(seed=[5, 1, 9])[0])
        with pytest.raises(ValueError, match="2 seeds for 3 envs"):
            sharded.reset(seed=[1, 2])
        with pytest.raises(ValueError, match="reset_mask"):
            sharded.reset(options={"reset_mask": np.ones(3, dtype=bool)})
    sync.close()


def test_call_and_set_attr_reach_every_env_in_order() -> None:
    with ShardedVectorEnv([_point_reach() for _ in range(5)], 2) as envs:
        envs.set_attr("tag", [10, 11, 12, 13, 14])
        assert envs.get_attr("tag") == (10, 11, 12, 13, 14)
        envs.set_attr("tag", "same")
        assert envs.call("tag") == ("same",) * 5
        envs.reset(seed=0)
        goals = envs.call("compute_reward", np.zeros(2), np.ones(2), {})
        assert len(goals) == 5 and all(g == -1.0 for g in goals)
        with pytest.raises(ValueError, match="2 values for 5 envs"):
            envs.set_attr("tag", [1, 2])


def test_an_env_error_names_its_envs_and_the_process_traceback() -> None:
    class Fails(gym.Wrapper):  # defined here, so that it is pickled by value into the processes
        def step(self, action):
            if self.unwrapped.np_random.random() < 2:  # always
                raise FloatingPointError("the simulation went unstable")
            return super().step(action)

    fns = [_point_reach(), _point_reach(), lambda: Fails(gym.make("herl/PointReach-v0"))]
    envs = ShardedVectorEnv(fns, 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"envs 2-2 raised(.|\n)*FloatingPointError: the simulation went unstable"):
            envs.step(np.zeros((3, 2), dtype=np.float32))
    finally:
        envs.close()
    assert envs.closed and not any(p.is_alive() for p in envs._processes)


def test_a_process_that_dies_closes_the_env_with_a_clear_error() -> None:
    envs = ShardedVectorEnv([_point_reach() for _ in range(4)], 2)
    envs.reset(seed=0)
    envs._processes[1].kill()
    envs._processes[1].join()
    with pytest.raises(RuntimeError, match="envs 2-3 ended unexpectedly"):
        envs.step(np.zeros((4, 2), dtype=np.float32))
    assert envs.closed


def test_refuses_no_envs_a_bad_process_count_and_mixed_spaces() -> None:
    with pytest.raises(ValueError, match="at least one env"):
        ShardedVectorEnv([], 2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_processes"):
            ShardedVectorEnv([_point_reach()], bad)
    with pytest.raises(ValueError, match="share their observation and action spaces"):
        ShardedVectorEnv([_point_reach(), lambda: gym.make("herl/BitFlipping-v0", n_bits=4)], 2)


def test_a_run_splits_its_envs_over_the_cores_at_most_one_process_per_env() -> None:
    cores = os.cpu_count() or 1
    assert env_processes(1024) == min(1024, cores)
    assert env_processes(1) == 1
    assert env_processes(8, 3) == 3
    assert env_processes(2, 16) == 2


def test_a_run_with_async_envs_steps_recorded_envs_in_shards_that_restore() -> None:
    """``vector_env="async"``: the run's envs, each recording its episode, split over the processes asked for; a
    snapshot taken through the processes restores in a fresh env, to the same observations."""
    env = make_training_env("herl/PointReach-v0", None, 3, "async", 2)
    fresh = make_training_env("herl/PointReach-v0", None, 3, "async", 3)
    try:
        assert isinstance(env, ShardedVectorEnv) and [list(s) for s in env.shards] == [[0, 1], [2]]
        env.reset(seed=0)
        for _ in range(3):
            obs = env.step(np.full((3, 2), 0.3, dtype=np.float32))[0]
        records = snapshot_envs(env)
        assert [actions.shape for _, actions in records] == [(3, 2)] * 3
        restored = restore_envs(fresh, [meta for meta, _ in records], [actions for _, actions in records])
        for i, each in enumerate(restored):
            _assert_same_obs({k: v[i] for k, v in obs.items()}, each)
    finally:
        env.close()
        fresh.close()


@pytest.mark.skipif(not __import__("importlib").util.find_spec("gymnasium_robotics"), reason="needs gymnasium-robotics")
def test_fetch_envs_in_shards_step_as_in_one_process() -> None:
    """Fetch envs of a shard share one MuJoCo model (as the sync vector env's do): the same steps, to the bit."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    from herl.envs.shared_models import shared_mujoco_models

    fns = [lambda: gym.make("FetchPush-v4", max_episode_steps=5) for _ in range(4)]
    with shared_mujoco_models():
        sync = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    with ShardedVectorEnv(fns, 2) as sharded:
        _assert_same_obs(sync.reset(seed=1)[0], sharded.reset(seed=1)[0])
        rng = np.random.default_rng(1)
        for _ in range(7):
            actions = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
            a, b = sync.step(actions), sharded.step(actions)
            _assert_same_obs(a[0], b[0])
            assert np.array_equal(a[1], b[1])
            _assert_same_infos(a[4], b[4])
    sync.close()
