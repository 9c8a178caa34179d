"""``herl train`` on batched envs: the run folder, exact resume, the settings it refuses, ``herl eval`` of such runs."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from herl.cli import main
from herl.run import batched
from herl.run.config import TrainConfig, build_config
from herl.run.errors import CLIError, Interrupted
from herl.run.folders import read_config
from herl.run.presets import get_preset, preset_for_env
from herl.training.base import OffPolicyAlgorithm

ENV = "herl/BatchedPointReach-v0"
# A run of well under a second: 8 envs, 1,200 env steps, 125 updates, evaluations and checkpoints every 400 steps.
TINY = ["--env", ENV, "--n-envs", "8", "--timesteps", "1200", "--progress", "off", "--set", "learning_starts=200",
        "--set", "batch_size=32", "--set", "policy.net_arch=[16,16]", "--set", "eval.freq=400",
        "--set", "eval.episodes=4", "--set", "checkpoint.freq=400", "--set", "checkpoint.keep=5",
        "--set", "batched.updates_per_step=0.125"]


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run, never interrupted."""
    run_dir = tmp_path_factory.mktemp("batched") / "whole"
    assert herl("train", *TINY, "--run-dir", run_dir) == 0
    return run_dir / "seed_0"


def _assert_same_model(a: Path, b: Path) -> None:
    first, second = OffPolicyAlgorithm.load(a), OffPolicyAlgorithm.load(b)
    assert first.num_timesteps == second.num_timesteps == 1200
    assert first._n_updates == second._n_updates
    for name, state in first.get_parameters().items():
        other = second.get_parameters()[name]
        if name.endswith(".optimizer"):
            for index, values in state["state"].items():
                for key, value in values.items():
                    assert torch.equal(value, other["state"][index][key]), f"{name}.{key}"
        else:
            for key, tensor in state.items():
                assert torch.equal(tensor, other[key]), f"{name}.{key}"


def _eval_rows(run: Path) -> list[tuple[str, str, str]]:
    with open(run / "progress.csv") as f:
        return [(r["time/total_timesteps"], r["eval/mean_reward"], r["eval/success_rate"])
                for r in csv.DictReader(f) if r["eval/mean_reward"]]


def test_a_run_writes_the_regular_run_folder(whole: Path) -> None:
    config = json.loads((whole / "config.json").read_text())
    assert config["env"] == ENV and config["n_envs"] == 8 and config["algo"] == "sac"
    assert config["batched"] == {"updates_per_step": 0.125, "collect_steps": 1}
    assert config["preset"] == "point_reach_batched" and config["hyperparameters"]["gamma"] == 0.95
    assert read_config(whole).batched.updates_per_step == 0.125  # read back and validated
    for name in ("model.zip", "progress.csv", "summary.json", "checkpoints/latest.json"):
        assert (whole / name).exists(), name
    assert _eval_rows(whole)[0][0] == "0" and [row[0] for row in _eval_rows(whole)] == ["0", "400", "800", "1200"]
    header = (whole / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"rollout/success_rate", "train/critic_loss", "train/n_updates", "time/fps", "time/wall_time"} <= set(header)
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["steps"] == 1200 and summary["final_mean_reward"] is not None
    assert json.loads((whole / "checkpoints" / "latest.json").read_text()) == {"step": 1200,
                                                                              "path": "step_000000001200"}
    assert sorted(p.name for p in (whole / "checkpoints").glob("step_*")) == [
        f"step_{step:012d}" for step in (400, 800, 1200)]
    assert sorted(p.name for p in (whole / "checkpoints" / "step_000000000400").iterdir()) == [
        "model.zip", "run.json", "trainer.zip"]
    # 1/8 update per env step, from the round that reaches learning_starts (steps 193-200) on
    assert OffPolicyAlgorithm.load(whole / "model.zip")._n_updates == (1200 - 192) // 8


def test_resume_after_a_kill_ends_as_the_uninterrupted_run(whole: Path, tmp_path: Path) -> None:
    """A process killed after its checkpoint at step 400 left later checkpoints and rows behind it (here: copied
    from the finished run, then the checkpoint pointer put back): --resume continues from step 400 to the same
    weights and the same evaluations."""
    run = tmp_path / "killed"
    shutil.copytree(whole, run)
    for name in ("model.zip", "summary.json"):
        (run / name).unlink()
    for step in (800, 1200):
        shutil.rmtree(run / "checkpoints" / f"step_{step:012d}")
    (run / "checkpoints" / "latest.json").write_text(json.dumps({"step": 400, "path": "step_000000000400"}))
    (run / "checkpoints" / ".tmp-step_000000000800").mkdir()  # a checkpoint cut short by the kill
    assert herl("train", "--resume", run, "--progress", "off") == 0
    _assert_same_model(whole / "model.zip", run / "model.zip")
    assert _eval_rows(run) == _eval_rows(whole)
    assert not (run / "checkpoints" / ".tmp-step_000000000800").exists()


def test_a_stop_signal_checkpoints_and_resume_ends_as_the_uninterrupted_run(whole: Path, tmp_path: Path) -> None:
    """SIGTERM during training: a checkpoint after the round in progress, then a stop; --resume finishes the run
    with the weights of the run never stopped."""
    config = read_config(whole)
    run = tmp_path / "stopped"

    def stop_after_first_evaluation(metrics: dict[str, float]) -> None:
        if metrics["time/total_timesteps"] == 400:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted, match="stopped by SIGTERM at step 408"):
        batched.start_run(config, run, progress="off", on_eval=stop_after_first_evaluation)
    assert batched.latest_checkpoint(run).step == 408 and not (run / "model.zip").exists()
    assert herl("train", "--resume", run, "--progress", "off") == 0
    _assert_same_model(whole / "model.zip", run / "model.zip")
    assert _eval_rows(run) == _eval_rows(whole)


def test_a_stop_signal_after_the_last_round_lets_the_run_finish(whole: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM once the last round has trained: the run writes its final evaluation, model and summary as the run
    never stopped did, and then stops the command (no other seed starts)."""
    from herl.batched.trainer import BatchedTrainer

    learn = BatchedTrainer.learn

    def learn_then_signalled(trainer, *args, **kwargs):
        learn(trainer, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(BatchedTrainer, "learn", learn_then_signalled)
    run = tmp_path / "finished"
    with pytest.raises(Interrupted, match="stopped by SIGTERM as the run finished at step 1,200"):
        batched.start_run(read_config(whole), run, progress="off")
    _assert_same_model(whole / "model.zip", run / "model.zip")
    assert _eval_rows(run) == _eval_rows(whole) and (run / "summary.json").exists()


def _rows_but_time(run: Path) -> list[dict[str, str]]:
    with open(run / "progress.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/") or k == "time/total_timesteps"}
                for row in csv.DictReader(f)]


def test_a_stop_at_an_evaluation_step_resumes_with_that_evaluation_and_the_same_rows(
        whole: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM during the round that ends at step 400, where an evaluation is due: the checkpoint comes first, and
    the resumed run makes that evaluation; every row (the losses of the updates before the stop included) is the
    run never stopped's."""
    config = read_config(whole)
    run = tmp_path / "stopped"
    write_rows = batched._RunLoop.write_rows

    def signal_at_400(loop: batched._RunLoop) -> None:
        write_rows(loop)
        if loop.trainer.model.num_timesteps == 400:  # the signal lands as the round ends, before the loop's checks
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(batched._RunLoop, "write_rows", signal_at_400)
    with pytest.raises(Interrupted, match="stopped by SIGTERM at step 400"):
        batched.start_run(config, run, progress="off")
    monkeypatch.undo()
    assert herl("train", "--resume", run, "--progress", "off") == 0
    _assert_same_model(whole / "model.zip", run / "model.zip")
    assert _eval_rows(run) == _eval_rows(whole)
    assert _rows_but_time(run) == _rows_but_time(whole)
    assert OffPolicyAlgorithm.load(run / "model.zip").config == OffPolicyAlgorithm.load(whole / "model.zip").config


def test_a_run_whose_last_round_passes_its_total_can_be_extended(tmp_path: Path) -> None:
    """8 envs step 104 steps for a total of 100: the run's files still load (the share of training left is saved as
    0, not below it), and --resume --timesteps extends it."""
    assert herl("train", *TINY, "--timesteps", "100", "--run-dir", tmp_path) == 0
    assert OffPolicyAlgorithm.load(tmp_path / "seed_0" / "model.zip").num_timesteps == 104
    assert herl("train", "--resume", tmp_path, "--timesteps", "300", "--progress", "off") == 0
    assert OffPolicyAlgorithm.load(tmp_path / "seed_0" / "model.zip").num_timesteps == 304


def test_eval_plays_one_episode_in_each_of_as_many_envs(whole: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("eval", whole, "--episodes", "6") == 0
    out = capsys.readouterr().out
    assert "1,200" in out and "50.0" in out  # trained steps, the episodes' length
    assert herl("eval", whole, "--video", whole.parent / "x.mp4") == 2
    assert "herl/PointReach-v0" in capsys.readouterr().err  # the gymnasium twin that renders


def test_a_model_acts_where_observations_have_its_keys_and_shapes() -> None:
    """Dtypes and bounds may differ (a batched env's float32 goals against gymnasium-robotics' unbounded float64
    ones); keys, shapes and the action space may not."""
    import gymnasium as gym
    import numpy as np

    from herl.run.errors import CLIError
    from herl.run.evaluate import check_spaces_fit

    def observations(dtype, dim=25, high=np.inf):
        return gym.spaces.Dict({"observation": gym.spaces.Box(-np.inf, np.inf, (dim,), dtype),
                                "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (3,), dtype),
                                "desired_goal": gym.spaces.Box(-high, high, (3,), dtype)})

    actions = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    model = OffPolicyAlgorithm.__new__(OffPolicyAlgorithm)
    model.observation_space, model.action_space = observations(np.float32, high=1.5), actions
    check_spaces_fit(model, observations(np.float64), actions, "twin")
    for obs_space, action_space in [(observations(np.float64, dim=26), actions),
                                    (observations(np.float32), gym.spaces.Box(-1.0, 1.0, (3,), np.float32)),
                                    (observations(np.float32), gym.spaces.Box(-2.0, 2.0, (4,), np.float32))]:
        with pytest.raises(CLIError, match="the model was not trained on other"):
            check_spaces_fit(model, obs_space, action_space, "other")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "1"], "workers=1"),
        (["--her", "random:4"], "her.strategy=random"),
        (["--set", "her.online_sampling=false"], "her.online_sampling=false"),
        (["--set", "her.desired_goal_share=0.5"], "her.desired_goal_share=0.5"),
        (["--set", "her.copy_info_dict=true"], "her.copy_info_dict=true"),
        (["--set", "noise.type=ornstein-uhlenbeck"], "noise.type=ornstein-uhlenbeck"),
        (["--demos", "scripted:5"], "demos.path=scripted:5"),
        (["--set", "env.speed=0.2"], "takes no env.speed; its settings are: env.dim, env.max_speed"),
        (["--set", "env.n_envs=4"], "set it with --n-envs"),
        (["--set", "batched.updates_per_step=-1"], "batched.updates_per_step"),
        (["--set", "batched.collect_steps=0"], "batched.collect_steps"),
        (["--set", "buffer_size=100"], "at least 2 * n_envs * max_episode_steps"),
    ],
)
def test_settings_that_mean_nothing_on_batched_envs_are_refused(flags: list[str], message: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *TINY, *flags, "--run-dir", tmp_path / "run") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "seed_0" / "config.json").exists()


def test_unknown_ids_and_batched_settings_elsewhere_are_refused(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    assert herl("train", "--env", "herl/BatchedPointReach-v1", "--run-dir", tmp_path) == 2
    assert "did you mean herl/BatchedPointReach-v0" in capsys.readouterr().err
    assert herl("train", "--env", "herl/PointReach-v0", "--set", "batched.collect_steps=2", "--run-dir", tmp_path) == 2
    assert "the batched.* settings are for batched envs" in capsys.readouterr().err


def test_the_preset_and_the_config_round_trip() -> None:
    preset = get_preset("point_reach_batched")
    assert preset_for_env(ENV) is preset and preset_for_env("herl/PointReach-v0").name == "point_reach"
    layers = [*preset.layers("sac"), ("--set", {"batched.updates_per_step": 0.01, "batched.collect_steps": 2})]
    config = build_config(algo="sac", env=ENV, seed=0, layers=layers, goal_env=True, preset=preset.name)
    assert config.n_envs == preset.common["n_envs"] and config.batched.collect_steps == 2
    assert config.batched.updates_per_step == 0.01
    assert TrainConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    regular = build_config(algo="sac", env="herl/PointReach-v0", seed=0, layers=preset.layers("sac"), goal_env=True,
                           preset=preset.name)  # --preset point_reach_batched on a gymnasium env: its table is left out
    assert regular.batched is None and regular.to_json()["batched"] is None
    no_envs = build_config(algo="dqn", env="herl/BatchedBitFlipping-v0", seed=0, layers=[], goal_env=True,
                           preset=None)
    assert no_envs.n_envs == 256 and any("n_envs=256" in note for note in no_envs.notes)


def test_list_shows_the_preset_and_the_gymnasium_runner_refuses_batched_runs(
        whole: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("list") == 0
    assert "herl/BatchedPointReach-v*" in capsys.readouterr().out
    from herl.run.train import resume_run

    with pytest.raises(CLIError, match="herl.run.batched"):
        resume_run(whole)


def test_check_env_checks_batched_envs(capsys):
    assert herl("check-env", "herl/BatchedBitFlipping-v0", "--set", "env.n_bits=5") == 0
    assert "OK: herl/BatchedBitFlipping-v0" in capsys.readouterr().out
    assert herl("check-env", "herl/BatchedPointRech-v0") == 2
    assert "did you mean herl/BatchedPointReach-v0" in capsys.readouterr().err
    assert herl("check-env", "herl/BatchedPointReach-v0", "--set", "env.foo=1") == 2
    assert "env.distance_threshold" in capsys.readouterr().err


def test_record_refuses_batched_envs(tmp_path, capsys):
    assert herl("record", "--env", "herl/BatchedPointReach-v0", "-o", tmp_path / "d") == 2
    err = capsys.readouterr().err
    assert "herl/BatchedPointReach-v0 is a batched env" in err and "herl/PointReach-v0 for herl/BatchedPointReach-v0" in err
    assert not (tmp_path / "d").exists()
