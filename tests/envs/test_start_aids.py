"""The training-only start distributions (``env.grasped_start``, ``env.contact_start``): episodes replay exactly, and
in runs and Ray workers they are saved in the run's config, resumed, and never in evaluation envs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("mujoco")

from herl.cli import main  # noqa: E402
from herl.envs import ContactStart, GraspedStart  # noqa: E402
from herl.run.envs import ReplayableEnv, make_env  # noqa: E402

AIDS = [("FetchPickAndPlace-v4", "grasped_start"), ("FetchPush-v4", "contact_start")]
WRAPPERS = {"grasped_start": GraspedStart, "contact_start": ContactStart}


@pytest.mark.parametrize(("env_id", "key"), AIDS)
def test_an_episode_replays_exactly_from_its_seed_or_generator_state(env_id: str, key: str):
    def make() -> ReplayableEnv:
        return ReplayableEnv(WRAPPERS[key](make_env(env_id), share=0.5))

    env = make()
    env.reset(seed=11)
    env.reset()  # unseeded: the replay restores the generator state, the coin (and the side) included
    starts = []
    for _ in range(6):
        starts.append(env.reset()[1][key])
        for action in np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4):
            obs = env.step(action)[0]
        restored = make().restore(*env.snapshot())
        for name in obs:
            np.testing.assert_array_equal(restored[name], obs[name])
    assert any(starts) and not all(starts)


@pytest.mark.parametrize(("env_id", "key"), AIDS)
def test_a_run_trains_evaluates_and_resumes_with_it(env_id: str, key: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]):
    args = ["--env", env_id, "--algo", "sac", "--timesteps", "150", "--progress", "off",
            "--set", f"env.{key}=0.5", "--set", "eval.freq=150", "--set", "eval.episodes=2",
            "--set", "learning_starts=60", "--set", "checkpoint.freq=100", "--set", "policy.net_arch=[16]"]
    assert main(["train", *args, "--run-dir", str(tmp_path)]) == 0
    run = tmp_path / "seed_0"
    assert json.loads((run / "config.json").read_text())["env_kwargs"][key] == 0.5
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert main(["train", "--resume", str(run), "--timesteps", "200", "--progress", "off"]) == 0


@pytest.mark.parametrize(("env_id", "key"), AIDS)
def test_ray_workers_collect_with_it_and_evaluate_from_the_envs_own_start(env_id: str, key: str):
    pytest.importorskip("ray")
    from herl.algorithms import SAC
    from herl.distributed.workers import Collector, acting_spec, acting_weights

    model = SAC("MultiInputPolicy", make_env(env_id), policy_kwargs={"net_arch": [16]}, seed=0)
    collector = Collector(env_id, {key: 1.0}, acting_spec(model), seed=0)  # the actor's class, without Ray
    episode = collector.episode(acting_weights(model), 0, num_timesteps=0, total_timesteps=100)
    first = episode.obs["observation"][0]
    grip_to_object = np.linalg.norm(first[3:6] - first[:3])
    assert grip_to_object < (1e-5 if key == "grasped_start" else 0.1)  # in the gripper, or beside it
    collector.evaluate(acting_weights(model), 0, 1, True, seed=0)
    obs, info = collector.eval_env.reset(seed=0)
    assert key not in info
    np.testing.assert_array_equal(obs["achieved_goal"], make_env(env_id).reset(seed=0)[0]["achieved_goal"])
