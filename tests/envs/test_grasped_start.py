"""GraspedStart: a share of FetchPickAndPlace's training episodes start with the block in the gripper;
``env.grasped_start=p`` on runs wraps training envs only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("mujoco")

from herl.cli import main  # noqa: E402
from herl.envs import GraspedStart  # noqa: E402
from herl.run.envs import ReplayableEnv, make_env, make_training_env  # noqa: E402
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


def test_an_episode_replays_exactly_from_its_seed_or_generator_state():
    env = ReplayableEnv(GraspedStart(make_env(PICK), share=0.5))
    env.reset(seed=11)
    env.reset()  # unseeded: the replay restores the generator state, coin included
    starts = []
    for _ in range(6):
        first, info = env.reset()
        starts.append(info["grasped_start"])
        for action in np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4):
            obs = env.step(action)[0]
        restored = ReplayableEnv(GraspedStart(make_env(PICK), share=0.5)).restore(*env.snapshot())
        for key in obs:
            np.testing.assert_array_equal(restored[key], obs[key])
    assert any(starts) and not all(starts)


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


def test_a_run_trains_evaluates_and_resumes_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    args = ["--env", PICK, "--algo", "sac", "--timesteps", "150", "--progress", "off",
            "--set", "env.grasped_start=0.5", "--set", "eval.freq=150", "--set", "eval.episodes=2",
            "--set", "learning_starts=60", "--set", "checkpoint.freq=100", "--set", "policy.net_arch=[16]"]
    assert main(["train", *args, "--run-dir", str(tmp_path)]) == 0
    run = tmp_path / "seed_0"
    assert json.loads((run / "config.json").read_text())["env_kwargs"]["grasped_start"] == 0.5
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert main(["train", "--resume", str(run), "--timesteps", "200", "--progress", "off"]) == 0


def test_ray_workers_collect_grasped_starts_and_evaluate_from_the_envs_own():
    pytest.importorskip("ray")
    from herl.algorithms import SAC
    from herl.distributed.workers import Collector, acting_spec, acting_weights

    model = SAC("MultiInputPolicy", make_env(PICK), policy_kwargs={"net_arch": [16]}, seed=0)
    collector = Collector(PICK, {"grasped_start": 1.0}, acting_spec(model), seed=0)  # the actor's class, without Ray
    episode = collector.episode(acting_weights(model), 0, num_timesteps=0, total_timesteps=100)
    first = episode.obs["achieved_goal"][0]
    np.testing.assert_allclose(first, episode.obs["observation"][0][:3], atol=1e-6)  # in the gripper
    collector.evaluate(acting_weights(model), 0, 1, True, seed=0)
    obs, info = collector.eval_env.reset(seed=0)
    assert "grasped_start" not in info and obs["achieved_goal"][2] == pytest.approx(0.42469975, abs=1e-3)
