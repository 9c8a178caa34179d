"""Fetch envs made in one process share one MuJoCo model per task, and step exactly as envs with their own do."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
import gymnasium_robotics  # noqa: E402
import mujoco  # noqa: E402
from gymnasium_robotics.envs import robot_env  # noqa: E402

from herl.envs import shared_mujoco_models  # noqa: E402
from herl.run.envs import make_training_env  # noqa: E402

gym.register_envs(gymnasium_robotics)


def rollout(envs, steps: int = 120) -> np.ndarray:
    """Step the envs in turn (as a vector env does) with the same seeded actions; episodes of 50 steps, so each env
    resets twice. Returns every observation, goal and reward seen."""
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 4))
    seen = []
    for i, env in enumerate(envs):
        obs, _ = env.reset(seed=i)
        seen.append(np.concatenate([obs["observation"], obs["desired_goal"]]))
    for action in actions:
        for env in envs:
            obs, reward, terminated, truncated, _ = env.step(action)
            seen.append(np.concatenate([obs["observation"], obs["desired_goal"], [reward]]))
            if terminated or truncated:
                obs, _ = env.reset()
                seen.append(np.concatenate([obs["observation"], obs["desired_goal"]]))
    return np.concatenate(seen)


@pytest.mark.parametrize("env_id", ["FetchPush-v4", "FetchPickAndPlace-v4"])
def test_shared_envs_step_exactly_as_envs_with_their_own_model(env_id):
    own = [gym.make(env_id) for _ in range(3)]
    with shared_mujoco_models():
        shared = [gym.make(env_id) for _ in range(3)]
    assert len({id(env.unwrapped.model) for env in own}) == 3
    assert len({id(env.unwrapped.model) for env in shared}) == 1
    assert len({id(env.unwrapped.data) for env in shared}) == 3  # each its own simulation state
    np.testing.assert_array_equal(rollout(shared), rollout(own))


def test_the_block_leaves_mujoco_as_it_found_it_even_on_an_error():
    with pytest.raises(RuntimeError, match="inside"):
        with shared_mujoco_models():
            assert robot_env.mujoco is not mujoco
            with shared_mujoco_models():  # nested: the outer block's sharing goes on
                assert robot_env.mujoco is not mujoco
            assert robot_env.mujoco is not mujoco
            raise RuntimeError("inside")
    assert robot_env.mujoco is mujoco
    env = gym.make("FetchReach-v4")
    assert env.unwrapped._mujoco is mujoco


def test_other_model_files_are_not_shared():
    from herl.envs.shared_models import _MujocoWithSharedModels

    assets = Path(robot_env.__file__).parent / "assets"
    fetch = _MujocoWithSharedModels(mujoco, assets / "fetch")
    hand = str(assets / "hand" / "reach.xml")
    assert fetch.MjModel.from_xml_path(hand) is not fetch.MjModel.from_xml_path(hand)
    push = str(assets / "fetch" / "push.xml")
    assert fetch.MjModel.from_xml_path(push) is fetch.MjModel.from_xml_path(push)
    assert fetch.mj_step is mujoco.mj_step  # the rest is MuJoCo's own


def test_training_envs_in_one_process_share_the_model_and_use_mujoco_itself():
    env = make_training_env("FetchPush-v4", None, 4)
    try:
        unwrapped = [each.unwrapped for each in env.envs]
        assert len({id(u.model) for u in unwrapped}) == 1
        assert all(u._mujoco is mujoco for u in unwrapped)
        obs, _ = env.reset(seed=0)
        for _ in range(60):  # past the episodes' end: SAME_STEP autoreset
            obs, *_ = env.step(np.zeros((4, 4)))
        assert np.isfinite(obs["observation"]).all()
    finally:
        env.close()
    assert robot_env.mujoco is mujoco
