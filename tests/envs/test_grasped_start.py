"""GraspedStart: a share of FetchPickAndPlace's training episodes start with the block in the gripper;
``env.grasped_start=p`` on runs wraps training envs only (runs and Ray workers: test_start_aids.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("mujoco")

from herl.envs import GraspedStart  # noqa: E402
from herl.run.envs import make_env, make_training_env  # noqa: E402
from herl.run.errors import CLIError  # noqa: E402

PICK = "FetchPickAndPlace-v4"
CLOSE, OPEN = np.array([0, 0, 0, -1.0], np.float32), np.array([0, 0, 0, 1.0], np.float32)


def grip(obs):
    return obs["observation"][:3]


def test_a_grasped_start_holds_the_block_while_the_gripper_stays_closed():
    env = GraspedStart(make_env(PICK), share=1.0)
    obs, info = env.reset(seed=3)
    assert info["grasped_start"]
    np.testing.assert_allclose(obs["achieved_goal"], grip(obs), atol=1e-6)  # the block at the grip site
    np.testing.assert_allclose(obs["observation"][9:11], [0.025, 0.025])  # fingers on its sides
    assert env.observation_space.contains(obs)
    start = obs["achieved_goal"].copy()
    up = np.array([0, 0, 1.0, -1.0], np.float32)
    for _ in range(5):
        obs = env.step(up)[0]
    assert obs["achieved_goal"][2] > start[2] + 0.03  # carried up with the gripper
    assert np.linalg.norm(obs["achieved_goal"] - grip(obs)) < 0.03
    for _ in range(10):
        obs = env.step(OPEN)[0]
    assert obs["achieved_goal"][2] < start[2] - 0.05  # let go, it falls to the table
    env.close()


def test_the_share_of_grasped_starts_and_the_rest_untouched():
    plain = make_env(PICK)
    env = GraspedStart(make_env(PICK), share=0.5)
    grasped = 0
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        reference = plain.reset(seed=seed)[0]
        np.testing.assert_array_equal(obs["desired_goal"], reference["desired_goal"])
        if info["grasped_start"]:
            grasped += 1
        else:  # the env's own start, exactly
            for key in obs:
                np.testing.assert_array_equal(obs[key], reference[key])
    assert 70 <= grasped <= 130  # Binomial(200, 0.5): outside this with probability < 1e-4
    never = GraspedStart(make_env(PICK), share=0.0)
    assert not any(never.reset(seed=s)[1]["grasped_start"] for s in range(20))


def test_training_envs_get_it_and_evaluation_envs_do_not():
    kwargs = {"grasped_start": 1.0, "action_repeat": 3, "time_feature": True}
    train = make_training_env(PICK, kwargs, 1)
    obs, info = train.reset(seed=0)
    assert info["grasped_start"] and obs["achieved_goal"][2] > 0.5
    assert obs["observation"].shape == (26,)  # 25 + the time feature
    vector = make_training_env(PICK, kwargs, 2)
    assert all(vector.reset(seed=0)[1]["grasped_start"])
    evaluation = make_env(PICK, kwargs)
    for seed in range(5):
        obs, info = evaluation.reset(seed=seed)
        assert "grasped_start" not in info
        assert obs["achieved_goal"][2] == pytest.approx(0.42469975, abs=1e-3)  # on the table


def test_bad_settings_are_named():
    with pytest.raises(CLIError, match="env.grasped_start is the share of training episodes.*from 0 to 1"):
        make_env(PICK, {"grasped_start": 1.5})
    with pytest.raises(CLIError, match="env.grasped_start is the share"):
        make_env(PICK, {"grasped_start": True})
    with pytest.raises(CLIError, match="FetchPush-v4 keeps its gripper blocked shut"):
        make_env("FetchPush-v4", {"grasped_start": 0.5})  # refused for evaluation envs too: a wrong run fails early
    with pytest.raises(CLIError, match="needs a gymnasium-robotics MuJoCo Fetch env"):
        make_env("herl/PointReach-v0", {"grasped_start": 0.5})
    with pytest.raises(ValueError, match="from 0 to 1"):
        GraspedStart(make_env(PICK), share=-0.1)

