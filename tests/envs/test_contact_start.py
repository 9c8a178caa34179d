"""ContactStart: a share of FetchPush's and FetchSlide's training episodes start with the object beside the gripper;
``env.contact_start=p`` on runs wraps training envs only (runs and Ray workers: test_start_aids.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("mujoco")

from herl.envs import ContactStart, GraspedStart  # noqa: E402
from herl.envs.contact_start import GAP  # noqa: E402
from herl.run.envs import make_env, make_training_env  # noqa: E402
from herl.run.errors import CLIError  # noqa: E402

PUSH, SLIDE = "FetchPush-v4", "FetchSlide-v4"


def offset(obs):
    """The object's position relative to the grip site."""
    return obs["observation"][3:6] - obs["observation"][:3]


@pytest.mark.parametrize("env_id", [PUSH, SLIDE])
def test_the_object_starts_beside_the_gripper_untouched_and_moves_when_pushed(env_id):
    env = ContactStart(make_env(env_id), share=1.0)
    plain = make_env(env_id)
    sides = []
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        reference = plain.reset(seed=seed)[0]
        assert info["contact_start"] and env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs["desired_goal"], reference["desired_goal"])  # the goal is the env's own
        np.testing.assert_array_equal(obs["observation"][:3], reference["observation"][:3])  # the gripper too
        assert obs["achieved_goal"][2] == pytest.approx(reference["achieved_goal"][2])  # on the table
        assert 0.03 < np.linalg.norm(offset(obs)[:2]) < 0.1
        assert env._distance_to_robot(env.unwrapped) >= GAP - 1e-9  # not touching, not overlapping
        sides.append(np.arctan2(*offset(obs)[1::-1]))
        start = obs["achieved_goal"].copy()
        if seed < 3:
            for _ in range(3):  # standing still: it stays where it was put
                obs = env.step(np.zeros(4, np.float32))[0]
            np.testing.assert_allclose(obs["achieved_goal"], start, atol=1e-4)
            toward = np.zeros(4, np.float32)
            toward[:2] = offset(obs)[:2] / np.linalg.norm(offset(obs)[:2])
            for _ in range(4):
                obs = env.step(toward)[0]
            assert np.linalg.norm(obs["achieved_goal"][:2] - start[:2]) > 0.02  # one push moves it
    assert np.ptp(np.cos(sides)) > 1.0 and np.ptp(np.sin(sides)) > 1.0  # on every side
    env.close()


def test_the_share_of_contact_starts_and_the_rest_untouched():
    plain = make_env(PUSH)
    env = ContactStart(make_env(PUSH), share=0.5)
    near = 0
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        reference = plain.reset(seed=seed)[0]
        if info["contact_start"]:
            near += 1
        else:  # the env's own start, exactly
            for key in obs:
                np.testing.assert_array_equal(obs[key], reference[key])
    assert 70 <= near <= 130  # Binomial(200, 0.5): outside this with probability < 1e-4
    never = ContactStart(make_env(PUSH), share=0.0)
    assert not any(never.reset(seed=s)[1]["contact_start"] for s in range(20))


def test_training_envs_get_it_and_evaluation_envs_do_not():
    kwargs = {"contact_start": 1.0, "action_repeat": 3, "time_feature": True}
    train = make_training_env(PUSH, kwargs, 1)
    obs, info = train.reset(seed=0)
    assert info["contact_start"] and np.linalg.norm(offset(obs)[:2]) < 0.1
    assert obs["observation"].shape == (26,)  # 25 + the time feature
    vector = make_training_env(PUSH, kwargs, 2)
    assert all(vector.reset(seed=0)[1]["contact_start"])
    evaluation, plain = make_env(PUSH, kwargs), make_env(PUSH)
    for seed in range(5):
        obs, info = evaluation.reset(seed=seed)
        assert "contact_start" not in info
        np.testing.assert_array_equal(obs["achieved_goal"], plain.reset(seed=seed)[0]["achieved_goal"])


def test_bad_settings_are_named():
    with pytest.raises(CLIError, match="env.contact_start is the share of training episodes.*from 0 to 1"):
        make_env(PUSH, {"contact_start": 1.5})
    with pytest.raises(CLIError, match="env.contact_start is the share"):
        make_env(PUSH, {"contact_start": False})
    with pytest.raises(CLIError, match="opens and starts above the object: use env.grasped_start"):
        make_env("FetchPickAndPlace-v4", {"contact_start": 0.5})  # refused for evaluation envs too: fails early
    with pytest.raises(CLIError, match="FetchReach-v4 has none"):
        make_env("FetchReach-v4", {"contact_start": 0.5})
    with pytest.raises(CLIError, match="needs a gymnasium-robotics MuJoCo Fetch env"):
        make_env("herl/PointReach-v0", {"contact_start": 0.5})
    with pytest.raises(CLIError, match="both set: an episode has one start"):
        make_env(PUSH, {"contact_start": 0.5, "grasped_start": 0.5})
    with pytest.raises(ValueError, match="from 0 to 1"):
        ContactStart(make_env(PUSH), share=-0.1)


def test_a_preset_s_contact_start_on_another_task_says_how_to_turn_it_off():
    # the fetch_push preset sets env.contact_start=0.5; `--preset fetch_push --env FetchPickAndPlace-v4` must say how
    # to drop it, and dropping it (0) with the grasped start set builds the PickAndPlace env
    with pytest.raises(CLIError, match=r"--set env.contact_start=0 turns it off"):
        make_env("FetchPickAndPlace-v4", {"contact_start": 0.5})
    with pytest.raises(CLIError, match=r"the other to 0 .*--set env.NAME=0"):
        make_env("FetchPickAndPlace-v4", {"contact_start": 0.5, "grasped_start": 0.5})
    env = make_env("FetchPickAndPlace-v4", {"contact_start": 0, "grasped_start": 0.5}, training=True)
    try:
        assert isinstance(env, GraspedStart)
    finally:
        env.close()

