"""The herl command: every subcommand on tiny budgets, the errors it gives, and exact resume after SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from herl.cli import main
from herl.envs import BitFlippingEnv
from herl.run.checkpoint import latest_checkpoint, load_checkpoint, write_checkpoint
from herl.run.config import build_config
from herl.run.envs import make_training_env
from herl.run.evaluate import wilson_interval
from herl.run.presets import load_presets
from herl.training.base import OffPolicyAlgorithm

# A run that takes a second or two: bit flipping, 8 bits, learning from step 100, evaluation and checkpoints
# every 100 steps.
TINY = ["--env", "herl/BitFlipping-v0", "--timesteps", "300", "--progress", "off", "--set", "env.n_bits=8",
        "--set", "learning_starts=100", "--set", "eval.freq=100", "--set", "eval.episodes=5",
        "--set", "checkpoint.freq=100", "--set", "policy.net_arch=[32,32]", "--set", "batch_size=32",
        "--set", "log_interval=5"]


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of two seeds, trained in two processes."""
    run_dir = tmp_path_factory.mktemp("runs") / "bits"
    assert herl("train", *TINY, "--seed", "0", "1", "--jobs", "2", "--run-dir", run_dir) == 0
    return run_dir


# ---------------------------------------------------------------------------------------------------------------------
# train


def test_train_writes_a_run_folder_per_seed(two_seeds: Path) -> None:
    for seed in (0, 1):
        run = two_seeds / f"seed_{seed}"
        config = json.loads((run / "config.json").read_text())
        assert config["algo"] == "dqn" and config["seed"] == seed and config["env_kwargs"] == {"n_bits": 8}
        assert config["hyperparameters"]["learning_starts"] == 100  # resolved: every hyperparameter is there
        assert config["hyperparameters"]["double_q"] is True  # from the preset
        assert config["her"] == {"strategy": "future", "n_sampled_goal": 4, "desired_goal_share": 0.0,
                                 "online_sampling": True, "copy_info_dict": False}
        for name in ("model.zip", "progress.csv", "summary.json", "checkpoints/latest.json"):
            assert (run / name).exists(), name
        assert list(run.glob("events.out.tfevents.*"))
        header = (run / "progress.csv").read_text().splitlines()[0].split(",")
        assert {"eval/success_rate", "time/total_timesteps", "time/wall_time", "rollout/success_rate"} <= set(header)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 300 and 0.0 <= summary["final_success"] <= 1.0
        assert latest_checkpoint(run).step == 300
        assert len(list((run / "checkpoints").glob("step_*"))) == 2  # checkpoint.keep
        umask = os.umask(0)
        os.umask(umask)
        for path in (run / "model.zip", run / "checkpoints" / "latest.json", latest_checkpoint(run).model_path):
            assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path  # not tempfile's private 0600


def test_seeds_differ(two_seeds: Path) -> None:
    a = OffPolicyAlgorithm.load(two_seeds / "seed_0" / "model.zip").get_parameters()["q_net"]
    b = OffPolicyAlgorithm.load(two_seeds / "seed_1" / "model.zip").get_parameters()["q_net"]
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_train_refuses_to_overwrite_a_run(two_seeds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *TINY, "--run-dir", two_seeds) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_without_algo_the_preset_chooses_and_flags_override_it(tmp_path: Path) -> None:
    assert herl("train", *TINY, "--timesteps", "120", "--her", "final:2", "--run-dir", tmp_path) == 0
    config = json.loads((tmp_path / "seed_0" / "config.json").read_text())
    assert config["algo"] == "dqn" and config["preset"] == "bit_flipping" and config["timesteps"] == 120
    assert config["her"]["strategy"] == "final" and config["her"]["n_sampled_goal"] == 2


def test_no_her_trains_with_plain_replay(tmp_path: Path) -> None:
    assert herl("train", *TINY, "--timesteps", "120", "--no-her", "--run-dir", tmp_path) == 0
    assert json.loads((tmp_path / "seed_0" / "config.json").read_text())["her"] is None


def test_continuous_algorithms_train(tmp_path: Path) -> None:
    for algo in ("sac", "td3", "ddpg"):
        assert herl("train", "--algo", algo, "--env", "herl/PointReach-v0", "--timesteps", "150", "--progress", "off",
                    "--set", "learning_starts=50", "--set", "eval.freq=100", "--set", "eval.episodes=2",
                    "--set", "batch_size=32", "--run-dir", tmp_path / algo) == 0
        config = json.loads((tmp_path / algo / "seed_0" / "config.json").read_text())
        assert config["algo"] == algo and config["preset"] == "point_reach"
        assert config["noise"]["type"] == ("none" if algo == "sac" else "normal")


# ---------------------------------------------------------------------------------------------------------------------
# resume


def test_resume_after_sigkill_continues_exactly(tmp_path: Path) -> None:
    """Killed with SIGKILL after a checkpoint, then resumed: same steps, same weights as a run never interrupted."""
    args = [*TINY, "--timesteps", "1500", "--set", "checkpoint.freq=150", "--set", "eval.freq=500"]
    assert herl("train", *args, "--run-dir", tmp_path / "whole") == 0

    command = [sys.executable, "-m", "herl", "train", *args, "--run-dir", str(tmp_path / "killed")]  # python -m herl
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run = tmp_path / "killed" / "seed_0"
    deadline = time.monotonic() + 120
    while (checkpoint := latest_checkpoint(run)) is None or checkpoint.step < 300:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run / "model.zip").exists(), "the run finished before it was killed: make it longer"
    killed_at = latest_checkpoint(run).step
    assert 300 <= killed_at < 1500

    assert herl("train", "--resume", tmp_path / "killed", "--progress", "off") == 0
    whole = OffPolicyAlgorithm.load(tmp_path / "whole" / "seed_0" / "model.zip")
    resumed = OffPolicyAlgorithm.load(run / "model.zip")
    assert resumed.num_timesteps == whole.num_timesteps == 1500
    assert resumed._n_updates == whole._n_updates and resumed._episode_num == whole._episode_num
    for name, state in whole.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                assert torch.equal(tensor, resumed.get_parameters()[name][key]), f"{name}.{key}"
    # the evaluations logged after the resume are those of the uninterrupted run
    evals = [_eval_rows(tmp_path / name / "seed_0") for name in ("whole", "killed")]
    assert evals[0] == evals[1] and len(evals[0]) == 4


def _rows_but_time(run: Path) -> list[dict[str, str]]:
    import csv

    with open(run / "progress.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/") or k == "time/total_timesteps"}
                for row in csv.DictReader(f)]


def test_a_stop_on_an_evaluation_step_resumes_with_the_same_log_and_settings(tmp_path: Path) -> None:
    """SIGTERM stops at a rollout start, where this run (updates once per episode, an evaluation every episode)
    is also due to evaluate and log: the resumed run makes that evaluation, logs the losses of the update before the
    stop in its first row, and keeps SAC's target_entropy="auto" in its settings, as the run never stopped."""
    args = ["--algo", "sac", "--env", "herl/PointReach-v0", "--timesteps", "1500", "--progress", "off",
            "--set", "learning_starts=100", "--set", "policy.net_arch=[16,16]", "--set", 'train_freq=[1,"episode"]',
            "--set", "gradient_steps=10", "--set", "log_interval=1", "--set", "eval.freq=50",
            "--set", "eval.episodes=2", "--set", "checkpoint.freq=100000"]
    assert herl("train", *args, "--run-dir", tmp_path / "whole") == 0
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--run-dir", str(tmp_path / "stopped")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "stopped" / "seed_0"
    deadline = time.monotonic() + 300
    while _logged_steps(run) < 300:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 130, process.stderr.read()
    stopped_at = latest_checkpoint(run).step
    assert 300 <= stopped_at < 1500 and stopped_at % 50 == 0  # at an evaluation step, every rollout start being one
    assert herl("train", "--resume", tmp_path / "stopped", "--progress", "off") == 0
    whole = OffPolicyAlgorithm.load(tmp_path / "whole" / "seed_0" / "model.zip")
    resumed = OffPolicyAlgorithm.load(run / "model.zip")
    assert resumed.config == whole.config and whole.config.target_entropy == "auto"
    assert_same_weights_and_optimizer_states(whole, resumed)
    assert _rows_but_time(run) == _rows_but_time(tmp_path / "whole" / "seed_0")


def _logged_steps(run: Path) -> int:
    import csv

    with contextlib.suppress(FileNotFoundError):
        text = (run / "progress.csv").read_text()
        rows = list(csv.DictReader(text[: text.rfind("\n") + 1].splitlines()))
        return max((int(float(r["time/total_timesteps"])) for r in rows if r.get("time/total_timesteps")), default=0)
    return 0


def _eval_rows(run: Path) -> list[tuple[str, str]]:
    import csv

    with open(run / "progress.csv") as f:
        return [(r["time/total_timesteps"], r["eval/mean_reward"]) for r in csv.DictReader(f) if r["eval/mean_reward"]]


def assert_same_weights_and_optimizer_states(a: OffPolicyAlgorithm, b: OffPolicyAlgorithm) -> None:
    """Every weight and every optimizer's state of ``a`` equal to ``b``'s, bit for bit."""
    theirs = b.get_parameters()
    for name, state in a.get_parameters().items():
        if name.endswith(".optimizer"):
            for index, values in state["state"].items():
                for key, value in values.items():
                    assert torch.equal(value, theirs[name]["state"][index][key]), f"{name}.{key}"
        else:
            for key, tensor in state.items():
                assert torch.equal(tensor, theirs[name][key]), f"{name}.{key}"


@pytest.mark.parametrize(("env", "preset"), [("FetchPush-v4", "fetch_push_many_envs"),
                                           ("FetchPickAndPlace-v4", "fetch_pick_and_place_many_envs")])
def test_the_many_envs_presets_train_and_resume_exactly(tmp_path: Path, env: str, preset: str) -> None:
    """The many-envs presets, scaled down (4 envs, tiny networks): several envs stepped per round and several updates
    per round; a run extended with --resume ends with the weights of a run never stopped."""
    pytest.importorskip("gymnasium_robotics")
    args = ["--env", env, "--preset", preset, "--n-envs", "4", "--threads", "1",
            "--progress", "off", "--set", "learning_starts=40", "--set", "batch_size=16", "--set", "gradient_steps=3",
            "--set", "policy.net_arch=[16,16]", "--set", "eval.freq=80", "--set", "eval.episodes=1",
            "--set", "checkpoint.freq=80"]
    assert herl("train", *args, "--timesteps", "160", "--run-dir", tmp_path / "whole") == 0
    assert herl("train", *args, "--timesteps", "80", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "160", "--progress", "off") == 0
    whole, parts = (OffPolicyAlgorithm.load(tmp_path / name / "seed_0" / "model.zip") for name in ("whole", "parts"))
    assert whole.num_timesteps == parts.num_timesteps == 160
    assert whole._n_updates == parts._n_updates == 3 * (160 - 40) // 4
    assert_same_weights_and_optimizer_states(whole, parts)


@pytest.mark.slow  # compiles the update (inductor) in each of the three runs
@pytest.mark.parametrize("env", ["FetchPush-v4", "FetchPickAndPlace-v4", "FetchSlide-v4"])
def test_the_fetch_presets_compile_their_update_and_resume_exactly(env: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """fetch_push, fetch_pick_and_place and fetch_slide as shipped (compiled update and acting, 3-step returns, action
    repeat, time feature, contact or grasped starts where they have them, their precision), scaled down: a run
    extended with --resume ends with the weights and Adam states of a run never stopped, bit for bit."""
    pytest.importorskip("gymnasium_robotics")
    args = ["--env", env, "--threads", "1", "--progress", "off", "--set", "learning_starts=30",
            "--set", "batch_size=16", "--set", "policy.net_arch=[16,16]", "--set", "eval.freq=40",
            "--set", "eval.episodes=1", "--set", "checkpoint.freq=40"]
    assert herl("train", *args, "--timesteps", "80", "--run-dir", tmp_path / "whole") == 0
    assert "the update compiled in" in capsys.readouterr().out  # compiled, not fallen back to the eager update
    assert herl("train", *args, "--timesteps", "40", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "80", "--progress", "off") == 0
    whole, parts = (OffPolicyAlgorithm.load(tmp_path / name / "seed_0" / "model.zip") for name in ("whole", "parts"))
    assert whole.config.compile and whole.config.n_steps == 3 and whole.num_timesteps == parts.num_timesteps == 80
    assert whole._n_updates == parts._n_updates == 80 - 30
    assert_same_weights_and_optimizer_states(whole, parts)


def test_resume_of_a_finished_run_does_nothing_and_can_extend_it(two_seeds: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *TINY, "--run-dir", tmp_path) == 0
    before = (tmp_path / "seed_0" / "model.zip").stat().st_mtime_ns
    capsys.readouterr()
    assert herl("train", "--resume", tmp_path, "--progress", "off") == 0
    out, err = capsys.readouterr()
    assert f"herl train: resuming 1 run in {tmp_path}\n" in out
    assert f"{tmp_path / 'seed_0'} finished at step 300 already: nothing to train (--timesteps N, a new total above " \
        "300, trains it on)" in err
    assert herl("train", "--resume", tmp_path, "--timesteps", "200") == 2
    assert "with --resume, --timesteps is the run's new total; give more than 300" in capsys.readouterr().err
    assert herl("train", "--resume", two_seeds, "--progress", "off") == 0  # a folder of seeds: the pace is named
    assert (f"herl train: resuming 2 runs in {two_seeds}, one at a time (--jobs 2 trains them at once)\n"
            in capsys.readouterr().out)
    assert herl("train", "--resume", two_seeds, "--jobs", "3", "--progress", "off") == 0
    assert f"herl train: resuming 2 runs in {two_seeds}, 2 at once\n" in capsys.readouterr().out
    assert (tmp_path / "seed_0" / "model.zip").stat().st_mtime_ns == before
    moved = tmp_path.parent / f"{tmp_path.name}_moved"
    shutil.copytree(two_seeds, moved)
    assert herl("train", "--resume", moved, "--progress", "off") == 0  # the summary names where the runs are now
    assert str(moved / "seed_1") in capsys.readouterr().out
    assert herl("train", "--resume", tmp_path / "seed_0", "--timesteps", "400", "--progress", "off") == 0
    assert OffPolicyAlgorithm.load(tmp_path / "seed_0" / "model.zip").num_timesteps == 400


def test_a_run_that_ends_past_its_total_loads_and_resumes(tmp_path: Path) -> None:
    """301 steps of 3 envs end at 303: the progress left is below 0 (as in SB3), and the files still load."""
    args = ["--env", "herl/BitFlipping-v0", "--set", "env.n_bits=4", "--set", "policy.net_arch=[16,16]",
            "--n-envs", "3", "--progress", "off"]
    assert herl("train", *args, "--timesteps", "301", "--run-dir", tmp_path) == 0
    model = OffPolicyAlgorithm.load(tmp_path / "seed_0" / "model.zip")
    assert model.num_timesteps == 303 and model._current_progress_remaining < 0
    assert herl("eval", tmp_path, "--episodes", "2") == 0
    assert herl("train", "--resume", tmp_path, "--timesteps", "600", "--progress", "off") == 0
    assert latest_checkpoint(tmp_path / "seed_0").step == 600


def test_extending_a_run_past_the_buffer_herl_chose_says_it_keeps_that_buffer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import herl.run.train as train

    monkeypatch.setattr(train, "MIN_BUFFER", 100)  # herl then sizes the buffer to the run: 300 transitions
    assert herl("train", *TINY, "--run-dir", tmp_path / "chosen") == 0
    assert herl("train", *TINY, "--set", "buffer_size=300", "--run-dir", tmp_path / "set") == 0
    capsys.readouterr()
    for steps in ("400", "500"):  # extended twice: one note, naming the latest length
        assert herl("train", "--resume", tmp_path / "chosen", "--timesteps", steps, "--progress", "off") == 0
        err = capsys.readouterr().err
        assert ("herl train: note: the buffer keeps the 300 transitions herl chose for the run's length when it "
                f"started; past that many the newest replace the oldest (a run started with --timesteps {steps} would "
                f"hold {steps};") in err
    notes = json.loads((tmp_path / "chosen" / "seed_0" / "config.json").read_text())["notes"]
    assert [n for n in notes if n.startswith("the buffer keeps")] == [notes[-1]] and "--timesteps 500" in notes[-1]
    assert notes[-1] in json.loads((tmp_path / "chosen" / "seed_0" / "summary.json").read_text())["notes"]
    assert OffPolicyAlgorithm.load(tmp_path / "chosen" / "seed_0" / "model.zip").config.buffer_size == 300
    assert herl("train", "--resume", tmp_path / "set", "--timesteps", "400", "--progress", "off") == 0
    assert "the buffer keeps" not in capsys.readouterr().err  # a buffer_size the user chose is theirs


def test_threads_per_run_fit_the_cores() -> None:
    from herl.run.train import threads_per_run

    assert threads_per_run(2, parallel=1, cpus=2) == 2  # alone: what the settings ask
    assert threads_per_run(2, parallel=2, cpus=2) == 1
    assert threads_per_run(4, parallel=3, cpus=8) == 2
    assert threads_per_run(1, parallel=4, cpus=2) == 1  # one at least
    assert threads_per_run(2, parallel=2, cpus=16) == 2  # never more than asked


def test_a_run_on_a_busy_machine_gets_the_threads_of_its_free_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A laptop always has other work running: a preset's two threads on 2 cores of which other work keeps one busy
    ran at a few decisions a second (their spinning threads wait for the busy core); the run takes one thread and says
    why, and threads asked for are kept with a note of the cost. Idle, the preset's two are kept."""
    import herl.utils as utils

    monkeypatch.setattr(utils, "available_cpus", lambda: 2)
    preset = tmp_path / "two_threads.toml"
    preset.write_text('description = "bits"\nenvs = ["herl/BitFlipping-v0"]\nalgo = "dqn"\nthreads = 2\n')
    for busy, name, expected in ((1.2, "busy", 1), (0.3, "idle", 2)):
        monkeypatch.setattr(utils, "busy_cores", lambda busy=busy: busy)
        assert herl("train", "--config", preset, *TINY, "--run-dir", tmp_path / name) == 0
        config = json.loads((tmp_path / name / "seed_0" / "config.json").read_text())
        err = capsys.readouterr().err
        assert config["threads"] == expected
        if expected == 1:
            assert "1 torch thread(s) per run, not 2: other work keeps 1.2 of the 2 CPU cores busy" in err
            assert any(n.startswith("threads=1 per run, not the settings' 2: fitted to the CPU cores free") for n in
                       config["notes"])
    monkeypatch.setattr(utils, "busy_cores", lambda: 1.2)
    assert herl("train", "--config", preset, *TINY, "--threads", "2", "--run-dir", tmp_path / "asked") == 0
    assert "2 torch threads per run, as asked, but other work keeps 1.2 of the 2 CPU cores busy" in \
        capsys.readouterr().err
    assert json.loads((tmp_path / "asked" / "seed_0" / "config.json").read_text())["threads"] == 2


def test_busy_cores_reads_the_machine_and_leaves_out_this_process() -> None:
    """Idle but for this process spinning, the machine's other work is well under a core."""
    import herl.utils as utils

    assert 0.0 <= utils.busy_cores(0.05) < (os.cpu_count() or 1) + 0.5
    assert utils.free_cores(2, 1.2) == 1 and utils.free_cores(2, 0.3) == 2 and utils.free_cores(2, 5.0) == 1


def test_runs_trained_at_once_get_threads_that_fit_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A preset's two threads are for a run alone on 2 cores: --jobs 2 lowers them to one per run (four runs of two
    threads each trained at a third of the speed of four runs of one); threads the command asks for are kept, with a
    note of what they cost."""
    import herl.run.train as train
    import herl.utils as utils

    monkeypatch.setattr(utils, "available_cpus", lambda: 2)
    monkeypatch.setattr(utils, "busy_cores", lambda: 0.0)  # an idle machine (the next test makes it busy)
    preset = tmp_path / "two_threads.toml"
    preset.write_text('description = "bits"\nenvs = ["herl/BitFlipping-v0"]\nalgo = "dqn"\nthreads = 2\n')

    def threads(run_dir: Path, seed: int) -> tuple[int, list[str]]:
        config = json.loads((run_dir / f"seed_{seed}" / "config.json").read_text())
        return config["threads"], config["notes"]

    assert herl("train", "--config", preset, *TINY, "--seed", "0", "1", "--jobs", "2", "--run-dir", tmp_path / "a") == 0
    assert "herl train: note: 1 torch thread(s) per run, not 2: 2 runs at once share 2 CPU cores" in capsys.readouterr().err
    for seed in (0, 1):
        count, notes = threads(tmp_path / "a", seed)
        assert count == 1 and any(n.startswith("threads=1 per run, not the settings' 2") for n in notes)

    assert herl("train", *TINY, "--threads", "2", "--seed", "0", "1", "--jobs", "2", "--run-dir", tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert "2 torch threads per run, as asked, but 2 runs at once share 2 CPU cores" in err and "--threads 1 fits" in err
    assert threads(tmp_path / "b", 0)[0] == 2  # asked for: kept

    assert herl("train", "--config", preset, *TINY, "--seed", "0", "1", "--run-dir", tmp_path / "c") == 0
    assert threads(tmp_path / "c", 1)[0] == 2 and "per run" not in capsys.readouterr().err  # one at a time

    # Resumed at once, they keep their own threads (a bit-exact continuation needs them), with a note of the cost.
    calls: list[tuple[list, int]] = []
    monkeypatch.setattr(train, "run_parallel", lambda jobs, n: calls.append((jobs, n)) or [])
    for jobs, noted in (("2", True), ("1", False)):
        assert herl("train", "--resume", tmp_path / "c", "--jobs", jobs, "--progress", "off") == 0
        assert [kwargs.get("threads") for _, kwargs in calls.pop()[0]] == [None, None]
        err = capsys.readouterr().err
        assert ("2 torch threads per run, the runs' own (a resumed run keeps them, to continue exactly" in err) is noted
    used: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", used.append)
    train.resume_run(tmp_path / "c" / "seed_0", timesteps=400, progress="off", threads=1)
    assert used == [1] and threads(tmp_path / "c", 0)[0] == 2


# herl train --resume in the round-trip matrix (tests/io/test_round_trip_matrix.py covers the Python API): every
# algorithm with the preset settings, and with the settings a model file holds set the other way (n-step returns, no
# observation normalizer, bfloat16 hidden layers where the algorithm has them, plain replay without HER)
RESUME_CASES = [(algo, False) for algo in ("dqn", "ddpg", "td3", "sac", "tqc", "crossq")] + [
    (algo, True) for algo in ("dqn", "ddpg", "td3", "sac", "tqc", "crossq")]


@pytest.mark.parametrize("algo, flipped", RESUME_CASES, ids=lambda v: v if isinstance(v, str) else
                         ("flipped" if v else "preset"))
def test_every_algorithm_resumes_exactly(algo: str, flipped: bool, tmp_path: Path) -> None:
    """A run resumed from its checkpoint ends with the weights, optimizer states (CrossQ: and batch renormalization
    statistics) and counters of a run never stopped."""
    env = ["--env", "herl/BitFlipping-v0", "--set", "env.n_bits=6"] if algo == "dqn" else ["--env", "herl/PointReach-v0"]
    args = ["--algo", algo, *env, "--progress", "off", "--set", "learning_starts=50", "--set", "eval.freq=100",
            "--set", "eval.episodes=2", "--set", "batch_size=16", "--set", "checkpoint.freq=100",
            "--set", "policy.net_arch=[16,16]"]
    if algo == "crossq":
        args += ["--set", "policy.renorm_warmup_steps=60"]  # the renormalized regime is reached and resumed
    if algo == "dqn":  # epsilon decays over the run's length: a run of 150 extended to 300 is another run unless it
        args += ["--set", "exploration_fraction=0"]  # is constant (the SIGKILL test resumes DQN's schedule mid-run)
    if flipped:
        args += ["--set", "n_steps=3", "--set", "normalize_observations=false", "--set", "her.enabled=false"]
        if algo != "crossq":  # CrossQ's batch renormalization runs in float32 only
            args += ["--set", "policy.precision=bfloat16"]
    assert herl("train", *args, "--timesteps", "300", "--run-dir", tmp_path / "whole") == 0
    assert herl("train", *args, "--timesteps", "150", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "300", "--progress", "off") == 0
    whole = OffPolicyAlgorithm.load(tmp_path / "whole" / "seed_0" / "model.zip")
    resumed = OffPolicyAlgorithm.load(tmp_path / "parts" / "seed_0" / "model.zip")
    assert type(whole).__name__.lower() == algo and resumed.num_timesteps == 300
    assert (whole._n_updates, whole._episode_num) == (resumed._n_updates, resumed._episode_num)
    if flipped:
        assert whole.config.n_steps == 3 and whole.encoder.normalizer is None
        assert whole.replay_buffer_class.__name__ != "HerReplayBuffer"
    assert_same_weights_and_optimizer_states(whole, resumed)


def test_demos_train_record_their_settings_and_resume_exactly(reach_demos: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """--demos: the dataset's absolute path and the defaults in config.json; a resumed run ends with the weights of a
    run never stopped (the demo store travels in the checkpoint's buffer); a missing dataset stops --resume."""
    monkeypatch.chdir(reach_demos.parent)
    args = ["--algo", "sac", "--env", "herl/PointReach-v0", "--progress", "off", "--demos", reach_demos.name,
            "--set", "learning_starts=50", "--set", "eval.freq=100", "--set", "eval.episodes=2", "--set", "batch_size=16",
            "--set", "checkpoint.freq=100", "--set", "policy.net_arch=[16,16]", "--set", "demos.batch_ratio=0.25"]
    assert herl("train", *args, "--timesteps", "300", "--run-dir", tmp_path / "whole") == 0
    config = json.loads((tmp_path / "whole" / "seed_0" / "config.json").read_text())
    assert config["demos"] == {"path": str(reach_demos), "batch_ratio": 0.25}
    assert config["hyperparameters"]["bc_loss_weight"] == 1.0 and config["hyperparameters"]["q_filter"] is True
    assert herl("train", *args, "--timesteps", "150", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "300", "--progress", "off") == 0
    whole = OffPolicyAlgorithm.load(tmp_path / "whole" / "seed_0" / "model.zip")
    resumed = OffPolicyAlgorithm.load(tmp_path / "parts" / "seed_0" / "model.zip")
    assert resumed.num_timesteps == 300 and resumed.replay_buffer_kwargs["demonstrations"] == str(reach_demos)
    for name, state in whole.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                assert torch.equal(tensor, resumed.get_parameters()[name][key]), f"{name}.{key}"
    reach_demos.rename(reach_demos.with_name("moved"))
    try:
        assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "400", "--progress", "off") == 2
        assert f"learns from the demonstrations at {reach_demos}, which cannot be found" in capsys.readouterr().err
    finally:
        reach_demos.with_name("moved").rename(reach_demos)


@pytest.mark.parametrize(("extra", "message"), [
    (["--algo", "dqn", "--env", "herl/BitFlipping-v0"], "--demos adds a behaviour-cloning loss to an actor"),
    (["--algo", "sac", "--env", "herl/PointReach-v0", "--no-her"], "--demos needs HER"),
    (["--algo", "sac", "--env", "herl/PointReach-v0", "--set", "demos.batch_ratio=1.0"], "demos.batch_ratio=1.0"),
])
def test_demos_errors(reach_demos: Path, tmp_path: Path, extra: list[str], message: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *extra, "--demos", reach_demos, "--timesteps", "10", "--run-dir", tmp_path) == 2
    assert message in capsys.readouterr().err


def test_scripted_demos_are_recorded_into_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--demos scripted:N records N episodes of herl's scripted Fetch expert into the run folder, which the config
    then names (so --resume reads them again); an env without an expert, or a bad count, is named."""
    pytest.importorskip("minari")
    pytest.importorskip("gymnasium_robotics")
    from herl.demos import load_minari

    args = ["--algo", "sac", "--env", "FetchReach-v4", "--progress", "off", "--set", "learning_starts=50",
            "--set", "eval.freq=100", "--set", "eval.episodes=1", "--set", "batch_size=16",
            "--set", "policy.net_arch=[16,16]", "--run-dir", tmp_path / "run"]
    assert herl("train", *args, "--demos", "scripted:3", "--timesteps", "100") == 0
    run = tmp_path / "run" / "seed_0"
    config = json.loads((run / "config.json").read_text())
    assert config["demos"]["path"] == str((run / "demos").resolve())
    assert any("scripted expert" in note for note in config["notes"])
    assert load_minari(run / "demos").n_episodes == 3
    assert herl("train", "--resume", tmp_path / "run", "--timesteps", "150", "--progress", "off") == 0
    capsys.readouterr()
    assert herl("train", *args[:-1], tmp_path / "bad", "--demos", "scripted:x", "--timesteps", "10") == 2
    assert "scripted:100" in capsys.readouterr().err
    assert herl("train", "--algo", "sac", "--env", "herl/PointReach-v0", "--demos", "scripted", "--progress", "off",
                "--timesteps", "10", "--run-dir", tmp_path / "point") == 2
    assert "no scripted expert for 'herl/PointReach-v0'" in capsys.readouterr().err


def test_a_missing_demos_dataset_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", "--algo", "sac", "--env", "herl/PointReach-v0", "--demos", tmp_path / "nothing",
                "--timesteps", "10", "--progress", "off", "--run-dir", tmp_path / "run") == 2
    assert "no dataset at" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="the OS lock is fcntl's")
def test_a_run_is_trained_by_one_process_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *TINY, "--timesteps", "100", "--run-dir", tmp_path) == 0
    lock = tmp_path / "seed_0" / "train.pid"
    # another process holds the run's lock (a pid file raced, 1 time in 6)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
        "os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode()); print('locked', flush=True); time.sleep(60)"),
        str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert herl("train", "--resume", tmp_path, "--timesteps", "200", "--progress", "off") == 2
        assert f"is being trained by process {holder.pid}" in capsys.readouterr().err
        assert lock.read_text() == str(holder.pid)  # the refused process left the holder's file alone
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up: the OS released its lock, and its pid file does not block
    assert herl("train", "--resume", tmp_path, "--timesteps", "200", "--progress", "off") == 0


@pytest.mark.skipif(sys.platform == "win32", reason="the OS lock is fcntl's")
def test_two_resumes_at_once_train_the_run_once(tmp_path: Path) -> None:
    assert herl("train", *TINY, "--timesteps", "100", "--run-dir", tmp_path) == 0
    command = [sys.executable, "-m", "herl", "train", "--resume", str(tmp_path), "--timesteps", "300", "--progress",
               "off"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    # one trains; the other is refused, or (if it started after the first finished) finds the run finished
    assert codes[0] == 0 and codes[1] in (0, 2), results
    refused = [err for (_, err), p in zip(results, procs) if p.returncode == 2]
    assert all("is being trained by process" in err for err in refused)


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one(tmp_path: Path) -> None:
    config = build_config(algo="dqn", env="herl/BitFlipping-v0", seed=0, goal_env=True, preset=None,
                          layers=[("test", {"env.n_bits": 4, "learning_starts": 10, "batch_size": 8})])
    from herl.run.train import build_model

    env = make_training_env(config.env, dict(config.env_kwargs), 1)
    model = build_model(config, env)
    model.learn(40)
    first = write_checkpoint(tmp_path, model, env, wall_time=1.0)
    model.learn(40, reset_num_timesteps=False)

    def crash(path: os.PathLike) -> None:
        Path(path).write_bytes(b"half a buffer")
        raise OSError("disk full")

    model.save_replay_buffer = crash
    with pytest.raises(OSError):
        write_checkpoint(tmp_path, model, env, wall_time=2.0)
    assert latest_checkpoint(tmp_path) == first
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))  # cleaned up
    restored, wall_time = load_checkpoint(first, make_training_env(config.env, dict(config.env_kwargs), 1))
    assert restored.num_timesteps == 40 and wall_time == 1.0


class UnseededBits(gym.Wrapper):
    """Bit flipping whose start ignores the env's seed: replaying its episodes cannot reproduce them."""

    def __init__(self) -> None:
        super().__init__(BitFlippingEnv(n_bits=6))
        # seeded, so the test is deterministic: from OS entropy, the replaying env drew the cut episode's own start
        # one run in 64 (6 bits), replayed it unchanged, and no warning came
        self.outside_rng = np.random.default_rng(7)

    def reset(self, *, seed=None, options=None):
        self.env.reset(seed=int(self.outside_rng.integers(1 << 30)))
        return self.env.unwrapped._get_obs(), {}


def test_an_env_that_replays_differently_gets_its_episodes_cut(tmp_path: Path) -> None:
    if "test/UnseededBits-v0" not in gym.envs.registry:
        # a function, not the wrapper class: gymnasium < 1.3 reads a class's metadata, a property on a wrapper
        gym.register("test/UnseededBits-v0", entry_point=lambda: UnseededBits(), max_episode_steps=6)
    config = build_config(algo="dqn", env="test/UnseededBits-v0", seed=0, goal_env=True, preset=None,
                          layers=[("test", {"learning_starts": 10, "batch_size": 8})])
    from herl.run.train import build_model

    env = make_training_env(config.env, {}, 1)
    model = build_model(config, env)
    model.learn(40)
    while model._ep_lengths[0] == 0:  # between two episodes there is nothing to replay: into the next one
        model.learn(1, reset_num_timesteps=False)
    steps = model.num_timesteps
    write_checkpoint(tmp_path, model, env, wall_time=1.0)
    with pytest.warns(UserWarning, match="cut short and new ones start"):
        restored, _ = load_checkpoint(latest_checkpoint(tmp_path), make_training_env(config.env, {}, 1))
    assert restored._ep_lengths.tolist() == [0] and restored.replay_buffer.storage.open_len.tolist() == [0]
    restored.learn(30, reset_num_timesteps=False)  # and training goes on
    assert restored.num_timesteps == steps + 30


# ---------------------------------------------------------------------------------------------------------------------
# eval, plot


def test_eval_prints_a_table(two_seeds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("eval", two_seeds, "--episodes", "4") == 0
    out = capsys.readouterr().out
    assert "success rate" in out and "mean return" in out and "episode length" in out
    assert "seed_0" in out and "seed_1" in out
    assert "95% interval" in out and "median of 2" in out


def test_eval_interval_and_median_match_the_rows(two_seeds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("eval", two_seeds, "--episodes", "6") == 0
    lines = capsys.readouterr().out.splitlines()
    seeds = [line.split() for line in lines if line.startswith("seed_")]
    rates = sorted(float(row[3]) for row in seeds)
    for row in seeds:
        low, high = wilson_interval(round(float(row[3]) * 6), 6)
        assert row[4] == f"{low:.2f}-{high:.2f}"
    median = next(line.split() for line in lines if line.startswith("median of 2"))
    assert float(median[3]) == pytest.approx(sum(rates) / 2, abs=0.006)


def test_wilson_interval_against_a_hand_computed_case() -> None:
    # 40 of 50: centre (0.8 + 1.96^2/100) / (1 + 1.96^2/50) = 0.77860, half-width 0.10897
    low, high = wilson_interval(40, 50)
    assert low == pytest.approx(0.66963, abs=1e-4) and high == pytest.approx(0.88757, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] > 0.2  # not empty at 0 of n
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(10, 10)[0] < 0.8
    wide, narrow = wilson_interval(45, 50), wilson_interval(450, 500)
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 2  # ten times the episodes: ~1/sqrt(10) the width
    with pytest.raises(ValueError, match="successes <= episodes"):
        wilson_interval(6, 5)


def test_eval_of_a_model_file_with_a_video(two_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    video = tmp_path / "bits.gif"
    assert herl("eval", two_seeds / "seed_0" / "model.zip", "--episodes", "2", "--video", video,
                "--video-episodes", "1") == 0
    assert video.stat().st_size > 0
    assert "video:" in capsys.readouterr().out
    assert herl("eval", two_seeds / "seed_0", "--episodes", "2", "--video", tmp_path / "two.gif") == 0
    assert "(2 episode(s)" in capsys.readouterr().out  # no more episodes than --episodes
    model, saved = two_seeds / "seed_0" / "model.zip", (two_seeds / "seed_0" / "model.zip").read_bytes()
    for flags, message in ((["--video", model], "is a file of the run folder"),
                           (["--video", two_seeds / "seed_0" / "progress.csv"], "is a file of the run folder"),
                           (["--video", tmp_path / "x.gif", "--video-episodes", "3"], "more than the --episodes 2")):
        assert herl("eval", two_seeds / "seed_0", "--episodes", "2", *flags) == 2
        assert message in capsys.readouterr().err
    assert model.read_bytes() == saved


def test_eval_of_a_folder_leaves_out_a_run_with_no_model_yet(two_seeds: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep's folder of runs, one of them stopped before its first evaluation: the others are evaluated."""
    runs = tmp_path / "runs"
    shutil.copytree(two_seeds, runs)
    (runs / "seed_1" / "model.zip").unlink()
    shutil.rmtree(runs / "seed_1" / "checkpoints")
    assert herl("eval", runs, "--episodes", "1") == 0
    captured = capsys.readouterr()
    assert "seed_1 has neither model.zip nor a checkpoint yet: nothing to evaluate: left out" in captured.err
    assert "seed_0" in captured.out and "seed_1" not in captured.out
    assert herl("eval", runs / "seed_1", "--episodes", "1") == 2  # the run itself: nothing to evaluate is an error
    assert "nothing to evaluate" in capsys.readouterr().err


def test_eval_skips_the_video_with_a_reason(two_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("eval", two_seeds / "seed_0", "--episodes", "1", "--video", tmp_path / "bits.avi") == 0
    assert "no video: " in capsys.readouterr().out


def test_an_mp4_without_its_writer_says_what_to_install_in_one_line(two_seeds: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("imageio") is None or importlib.util.find_spec("imageio_ffmpeg") is not None:
        pytest.skip("needs imageio without imageio-ffmpeg")
    assert herl("eval", two_seeds / "seed_0", "--episodes", "1", "--video", tmp_path / "bits.mp4") == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("no video"))
    assert line == ("no video: writing mp4 needs imageio-ffmpeg, which is not installed: pip install 'herl[video]', "
                    "or write a .gif")
    assert not list(tmp_path.iterdir())  # nothing half-written left behind


def test_eval_of_a_bare_model_needs_the_env(two_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "model.zip"
    bare.write_bytes((two_seeds / "seed_0" / "model.zip").read_bytes())
    assert herl("eval", bare, "--episodes", "1") == 2
    assert "pass --env ID" in capsys.readouterr().err
    assert herl("eval", bare, "--episodes", "1", "--env", "herl/BitFlipping-v0", "--set", "env.n_bits=8") == 0


def test_eval_of_a_checkpoint_takes_its_runs_env_settings(two_seeds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint's folder or its model file: evaluated on the run's env (8 bits here; the env's default, 10, would
    not fit the model), at the checkpoint's step."""
    checkpoint = two_seeds / "seed_0" / "checkpoints" / "step_000000000200"
    assert herl("eval", checkpoint, "--episodes", "2") == 0
    assert herl("eval", checkpoint / "model.zip", "--episodes", "2") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "step_000000000200" in line]
    assert len(rows) == 2 and all(" 200 " in row for row in rows)


def test_plot_draws_a_png(two_seeds: Path, tmp_path: Path) -> None:
    output = tmp_path / "curves.png"
    assert herl("plot", two_seeds, "-o", output) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and output.stat().st_size > 10_000
    assert herl("plot", two_seeds / "seed_0", two_seeds, "--x", "time", "--band", "std", "--metric",
                "rollout/success_rate", "-o", tmp_path / "time.png") == 0


def test_plot_wraps_a_long_title_within_the_figure(two_seeds: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two envs' ids and the band's name made one title line wider than the figure: it was cut at both edges."""
    import matplotlib.figure

    widths = []
    save = matplotlib.figure.Figure.savefig

    def measured(fig, *args, **kwargs):
        renderer = fig.canvas.get_renderer()
        title = fig.axes[0].title
        widths.append((title.get_window_extent(renderer).width, fig.bbox.width, title.get_text()))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", measured)
    other = tmp_path / "other" / "seed_0"
    shutil.copytree(two_seeds / "seed_0", other)
    config = json.loads((other / "config.json").read_text())
    config["env"] = "a_module_of_ones_own:AVeryLongGoalEnvironmentName-v0"
    (other / "config.json").write_text(json.dumps(config))
    assert herl("plot", two_seeds, other.parent, "-o", tmp_path / "both.png") == 0
    (title_width, figure_width, text), = widths
    assert "\n" in text and title_width < figure_width


def test_plot_marks_reference_points(two_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.axes

    drawn = []
    original = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append((kwargs.get("label"), [list(a) for a in args[:2]]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    assert herl("plot", two_seeds, "--reference", "zoo TQC=100:0.6,200:0.95", "--reference", "other=50:0.1",
                "-o", tmp_path / "ref.png") == 0
    assert ("zoo TQC", [[100.0, 200.0], [0.6, 0.95]]) in drawn and ("other", [[50.0], [0.1]]) in drawn
    assert herl("plot", two_seeds, "--reference", "zoo=100-0.6", "-o", tmp_path / "bad.png") == 2
    assert "--reference takes LABEL=X:Y" in capsys.readouterr().err


def test_plot_counts_env_steps_of_an_action_repeat_run(two_seeds: Path, tmp_path: Path) -> None:
    """A run with env.action_repeat=k counts decisions: its x axis in env steps is k times that, and the label says so."""
    import shutil

    from herl.run.plot import load_curve

    repeated = tmp_path / "repeated" / "seed_0"
    shutil.copytree(two_seeds / "seed_0", repeated)
    config = json.loads((repeated / "config.json").read_text())
    config["env_kwargs"] = {**config["env_kwargs"], "action_repeat": 3}
    (repeated / "config.json").write_text(json.dumps(config))
    plain, tripled = load_curve(two_seeds / "seed_0", "eval/success_rate", "steps"), load_curve(repeated, "eval/success_rate", "steps")
    np.testing.assert_array_equal(tripled.seeds[0][0], 3 * plain.seeds[0][0])
    np.testing.assert_array_equal(tripled.seeds[0][1], plain.seeds[0][1])
    assert "decisions x 3" in tripled.label and "decisions" not in plain.label
    in_time = load_curve(repeated, "eval/success_rate", "time")  # wall time is wall time
    assert "decisions" not in in_time.label


def test_plot_names_the_metrics_it_has(two_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("plot", two_seeds, "--metric", "eval/sucess_rate", "-o", tmp_path / "x.png") == 2
    assert "eval/success_rate" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------------
# check-env, list, errors


def test_check_env(capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("check-env", "herl/PointReach-v0") == 0
    assert "OK" in capsys.readouterr().out
    assert herl("check-env", "CartPole-v1") == 1
    assert "observation_space is Box, not gymnasium.spaces.Dict" in capsys.readouterr().out


def test_a_module_env_class_that_is_not_registered_is_named_with_how_to_register_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "herl_test_own_env.py").write_text(
        "from herl.envs import PointReachEnv\n\nclass OwnReach(PointReachEnv):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert herl("check-env", "herl_test_own_env:OwnReach") == 2
    err = capsys.readouterr().err
    assert "'herl_test_own_env' defines the env class OwnReach but registers no env id 'OwnReach'" in err
    assert "gymnasium.register('OwnReach', entry_point=OwnReach, max_episode_steps=N)" in err
    assert herl("check-env", "herl_test_own_env:Missing-v0") == 2  # no such class either: the general message
    assert "unknown env id 'Missing-v0'" in capsys.readouterr().err


def test_an_env_whose_episodes_never_end_is_named_with_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # an episode that never ends held the run's first evaluation forever
    from herl import TD3
    from herl.envs import PointReachEnv
    from herl.run import envs as run_envs

    (tmp_path / "herl_test_endless.py").write_text(
        "import gymnasium as gym\nfrom herl.envs import PointReachEnv\n\n"
        "gym.register('EndlessReach-v0', entry_point=PointReachEnv, kwargs={'max_episode_steps': None})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = "herl_test_endless:EndlessReach-v0"
    assert herl("check-env", env_id) == 1
    out = capsys.readouterr().out
    assert "no episode ended within 10,000 random steps, and gymnasium sets the env no time limit" in out
    assert "register it with max_episode_steps=N, or --set env.max_episode_steps=N" in out
    assert herl("check-env", env_id, "--set", "env.max_episode_steps=20") == 0  # the fix it names
    monkeypatch.setattr(run_envs, "ENDLESS_EPISODE_STEPS", 300)
    assert herl("train", "--env", env_id, "--algo", "td3", "--timesteps", "200", "--run-dir", tmp_path / "run",
                "--progress", "off", "--threads", "1") == 2
    err = capsys.readouterr().err
    assert f"an evaluation episode of {env_id} ran 300 steps without ending" in err and "env.max_episode_steps=N" in err
    TD3("MultiInputPolicy", PointReachEnv(), policy_kwargs=dict(net_arch=[8]), seed=0).save(tmp_path / "m.zip")
    assert herl("eval", tmp_path / "m.zip", "--env", env_id, "--episodes", "2") == 2
    assert "ran 300 steps without ending" in capsys.readouterr().err
    assert herl("eval", tmp_path / "m.zip", "--env", env_id, "--episodes", "2", "--set", "env.max_episode_steps=20") == 0
    pytest.importorskip("minari")
    assert herl("record", "--env", env_id, "--policy", tmp_path / "m.zip", "--episodes", "2", "-o",
                tmp_path / "demos") == 2
    assert f"a recorded episode of {env_id} ran 300 steps without ending" in capsys.readouterr().err
    assert not (tmp_path / "demos").exists()
    assert herl("record", "--env", env_id, "--policy", tmp_path / "m.zip", "--episodes", "2", "-o",
                tmp_path / "demos", "--set", "env.max_episode_steps=20") == 0


def test_an_env_that_raises_in_check_env_fails_after_its_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "herl_test_raising.py").write_text(
        "import gymnasium as gym\nfrom herl.envs import PointReachEnv\n\n"
        "class Raising(PointReachEnv):\n    def step(self, action):\n        raise KeyError('velocity')\n\n"
        "gym.register('Raising-v0', entry_point=Raising, max_episode_steps=20)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert herl("check-env", "herl_test_raising:Raising-v0") == 1
    captured = capsys.readouterr()
    assert "FAIL: the env raised KeyError: 'velocity' (traceback above)" in captured.out
    assert "in step" in captured.err and "raise KeyError('velocity')" in captured.err


@pytest.mark.parametrize(("args", "message"), [
    (["train", "--env", "herl/BitFlipping-v0", "--seeds", "2"],
     "herl train: error: unrecognized arguments: --seeds 2 (did you mean '--seed'?)"),  # herl sweep's flag
    (["eval", "runs", "--episodez=3"], "herl eval: error: unrecognized arguments: --episodez=3 (did you mean '--episodes'?)"),
    (["list", "extra"], "herl list: error: unrecognized arguments: extra"),
])
def test_a_flag_a_command_does_not_take_is_named_by_that_command_with_the_closest(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        herl(*args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == message
    assert err.startswith(f"usage: herl {args[0]} ")  # the command's usage, not herl's


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("list") == 0
    out = capsys.readouterr().out
    for name in ("bit_flipping", "point_reach", "fetch_reach", "fetch_push", "panda_reach", "sac", "dqn", "future",
                 "episode"):
        assert name in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "85,000 decisions (x3)" in rows["fetch_push"]  # its TQC table's steps, which count decisions
    assert "(--preset NAME)" in rows["fetch_push_demos"] and "100,000" in rows["fetch_push_demos"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--env", "herl/BitFlip-v0"], "did you mean herl/BitFlipping-v0"),
        (["train", "--env", "CartPole-v1", "--her", "future:4"],
         "CartPole-v1 cannot be trained with HER: observation_space is Box"),
        (["train", "--env", "PandaReach-v3"], "pip install 'herl[panda]'"),
        (["train", "--env", "herl/BitFlipping-v0", "--set", "learnin_rate=1e-3"], "did you mean learning_rate"),
        (["train", "--env", "herl/BitFlipping-v0", "--set", "env.n_bit=3"], "its constructor takes: n_bits"),
        (["train", "--env", "herl/PointReach-v0", "--algo", "dqn"], "use --algo sac, tqc, crossq, td3 or ddpg"),
        (["train", "--env", "herl/BitFlipping-v0", "--her", "futur:4"], "future, final, episode, random"),
        (["train", "--env", "herl/BitFlipping-v0", "--set", "her.strategy=futur"], "her.strategy must be one of"),
        (["train", "--timesteps", "10"], "--env ID"),
        (["train", "--resume", "nowhere", "--algo", "sac"], "--resume continues a run with its own settings"),
        (["train", "--env", "herl/BitFlipping-v0", "--preset", "fetch_rech"], "did you mean fetch_reach"),
        (["eval", "no/such/model.zip"], "no such model file or run folder"),
    ],
)
def test_errors_say_what_to_do(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert herl(*args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_robotics_package_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    from herl.run import envs

    real_import = importlib.import_module

    def no_robotics(name: str, *args: object):
        if name == "gymnasium_robotics":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args)

    monkeypatch.setattr(envs.importlib, "import_module", no_robotics)
    assert herl("train", "--env", "FetchPush-v9") == 2
    assert "FetchPush-v9 needs gymnasium-robotics, which is not installed: pip install 'herl[robotics]'" in \
        capsys.readouterr().err


def test_a_bad_key_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", "--env", "herl/BitFlipping-v0", "--set", "nonsense=1") == 2
    err = capsys.readouterr().err
    assert "valid keys for dqn" in err and "exploration_fraction" in err and "her.n_sampled_goal" in err


def test_every_preset_resolves_for_each_of_its_algorithms() -> None:
    for preset in load_presets().values():
        for algo in {preset.algo, *preset.per_algo}:
            config = build_config(algo=algo, env="X-v0", seed=0, layers=preset.layers(algo), goal_env=True,
                                  preset=preset.name)
            assert config.her is not None and config.timesteps > 0
            # the entries the preset's measured runs read (herl's own default reads all of them)
            assert list(config.policy.input_keys) == ["observation", "desired_goal"], preset.name


def test_policy_input_keys_from_the_command_line(tmp_path: Path) -> None:
    from herl import DQN

    assert main(["train", "--env", "herl/BitFlipping-v0", "--timesteps", "50", "--set", "env.n_bits=4", "--set",
                 'policy.input_keys=["achieved_goal", "desired_goal", "observation"]', "--run-dir", str(tmp_path)]) == 0
    assert DQN.load(tmp_path / "seed_0" / "model.zip").encoder.keys == ("achieved_goal", "desired_goal", "observation")
    assert herl("train", "--env", "herl/BitFlipping-v0", "--set", "policy.input_keys=[\"nope\"]",
                "--run-dir", str(tmp_path / "bad")) == 2



def test_desired_goal_share_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from herl.run.train import build_model

    config = build_config(algo="dqn", env="herl/BitFlipping-v0", seed=0, goal_env=True, preset=None,
                          layers=[("set", {"her.desired_goal_share": 0.5, "env.n_bits": 4})])
    buffer = build_model(config, make_training_env(config.env, dict(config.env_kwargs), 1)).replay_buffer
    assert buffer.desired_goal_share == 0.5
    assert main(["train", "--env", "herl/BitFlipping-v0", "--timesteps", "50", "--set", "her.desired_goal_share=0.5",
                 "--set", "env.n_bits=4", "--run-dir", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr()
    assert "HER (future, k=4, 0.5 of them other episodes' desired goals)" in out.out + out.err
    assert main(["train", "--env", "herl/BitFlipping-v0", "--timesteps", "50", "--set", "her.desired_goal_share=2",
                 "--run-dir", str(tmp_path / "bad")]) == 2
    assert "her.desired_goal_share" in capsys.readouterr().err


def test_removed_her_options_are_refused_on_the_command_line_and_ignored_with_a_note_in_files(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """her.episode_priority, her.goal_motion_*, her.goal_lift_weight and her.motion_bonus* were removed: --set names
    them as unknown keys; a preset file or a run folder written before still loads, with a note that they are
    ignored."""
    assert main(["train", "--env", "herl/BitFlipping-v0", "--timesteps", "50", "--set", "her.motion_bonus=0.5",
                 "--run-dir", str(tmp_path / "refused")]) == 2
    assert "unknown key 'her.motion_bonus'" in capsys.readouterr().err
    preset = tmp_path / "old.toml"
    preset.write_text('description = "old"\nenvs = ["herl/BitFlipping-v0"]\nalgo = "dqn"\ntimesteps = 300\n'
                      '[her]\nepisode_priority = "goal_motion"\ngoal_lift_weight = 30.0\n'
                      '[algos.dqn]\nlearning_starts = 100\n')
    with pytest.warns(UserWarning, match="her.episode_priority='goal_motion', her.goal_lift_weight=30.0: options herl "
                                         "no longer has.*they were on"):
        assert main(["train", "--config", str(preset), "--set", "env.n_bits=4", "--progress", "off",
                     "--run-dir", str(tmp_path / "run")]) == 0
    run = tmp_path / "run" / "seed_0"
    config = json.loads((run / "config.json").read_text())
    assert not any("motion" in key or "lift" in key or "priority" in key for key in config["her"])
    config["her"].update(episode_priority="none", goal_motion_scale=0.05, goal_motion_weight=10.0,
                         goal_lift_weight=0.0, motion_bonus=0.0, motion_bonus_scale=0.01)  # as written before
    (run / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"config.json names her.episode_priority='none', .*they were off, so "
                                         r"nothing changes"):
        assert main(["train", "--resume", str(tmp_path / "run"), "--timesteps", "400", "--progress", "off"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 400


def test_async_envs_train_as_sync_ones_and_resume_exactly(tmp_path: Path) -> None:
    """vector_env=async splits the envs over processes (here 3 envs over 2: shards of 2 and 1): the run is the sync
    run's, bit for bit, and a run stopped and resumed with async envs ends as the one never stopped."""
    args = ["--env", "herl/PointReach-v0", "--n-envs", "3", "--progress", "off", "--set", "learning_starts=50",
            "--set", "eval.freq=99", "--set", "eval.episodes=2", "--set", "batch_size=16", "--set", "checkpoint.freq=99",
            "--set", "policy.net_arch=[16,16]"]
    async_envs = ["--set", "vector_env=async", "--set", "env_processes=2"]
    assert herl("train", *args, "--timesteps", "300", "--run-dir", tmp_path / "sync") == 0
    assert herl("train", *args, *async_envs, "--timesteps", "300", "--run-dir", tmp_path / "async") == 0
    assert herl("train", *args, *async_envs, "--timesteps", "150", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "300", "--progress", "off") == 0
    config = json.loads((tmp_path / "parts" / "seed_0" / "config.json").read_text())
    assert config["vector_env"] == "async" and config["n_envs"] == 3 and config["env_processes"] == 2
    sync = OffPolicyAlgorithm.load(tmp_path / "sync" / "seed_0" / "model.zip")
    for run in ("async", "parts"):
        other = OffPolicyAlgorithm.load(tmp_path / run / "seed_0" / "model.zip")
        assert (other.num_timesteps, other._n_updates, other._episode_num) == \
            (sync.num_timesteps, sync._n_updates, sync._episode_num), run
        for name, state in sync.get_parameters().items():
            if not name.endswith(".optimizer"):
                for key, tensor in state.items():
                    assert torch.equal(tensor, other.get_parameters()[name][key]), (run, name, key)


def test_async_envs_refuse_what_steps_its_envs_elsewhere(tmp_path: Path, capsys) -> None:
    assert herl("train", "--env", "herl/PointReach-v0", "--set", "vector_env=threads", "--progress", "off",
                "--run-dir", tmp_path / "a") != 0
    assert "vector_env" in capsys.readouterr().err
    assert herl("train", "--env", "herl/BatchedPointReach-v0", "--set", "vector_env=async", "--progress", "off",
                "--run-dir", tmp_path / "b") != 0
    assert "a batched env steps its envs as one batch of tensors: leave vector_env at sync" in capsys.readouterr().err
    assert herl("train", "--env", "herl/PointReach-v0", "--n-envs", "2", "--set", "env_processes=2", "--progress", "off",
                "--run-dir", tmp_path / "c") != 0
    assert "env_processes=2 splits the envs over processes only with vector_env=async" in capsys.readouterr().err


def test_the_features_extractor_is_a_policy_setting(tmp_path: Path, capsys) -> None:
    """Goal envs whose observations are images get SB3's CombinedExtractor by themselves; policy.features_extractor*
    choose and size one, and a CNN on observations that are not images is refused with the reason."""
    assert herl("train", "--env", "herl/BitFlipping-v0", "--set", "env.image_obs_space=true", "--set", "env.n_bits=4",
                "--timesteps", "300", "--set", "policy.features_extractor_kwargs={cnn_output_dim = 16}",
                "--set", "eval.freq=300", "--set", "eval.episodes=2", "--progress", "off", "--run-dir", tmp_path / "a") == 0
    model = OffPolicyAlgorithm.load(tmp_path / "a" / "seed_0" / "model.zip")
    assert model.policy_config.features_extractor == "CombinedExtractor"
    assert model.q_net.features_extractor.features_dim == 2 * 16  # the observation's image and the goal's
    assert json.loads((tmp_path / "a" / "seed_0" / "config.json").read_text())["policy"]["features_extractor_kwargs"] \
        == {"cnn_output_dim": 16}
    assert herl("train", "--env", "herl/PointReach-v0", "--timesteps", "300", "--set", "policy.features_extractor=NatureCNN",
                "--progress", "off", "--run-dir", tmp_path / "b") != 0
    assert "NatureCNN (CnnPolicy's network) reads images" in capsys.readouterr().err
    assert herl("train", "--env", "herl/PointReach-v0", "--timesteps", "300", "--set", "policy.features_extractor=Nope",
                "--progress", "off", "--run-dir", tmp_path / "c") == 2
    assert "herl's own are ['CombinedExtractor', 'FlattenExtractor', 'NatureCNN']" in capsys.readouterr().err


def test_a_run_with_a_features_extractor_resumes_exactly(tmp_path: Path) -> None:
    """HER on image goals (CombinedExtractor, sized by policy.features_extractor_kwargs): a run resumed from its
    checkpoint ends with the weights and counters of the run never stopped."""
    args = ["--env", "herl/BitFlipping-v0", "--set", "env.image_obs_space=true", "--set", "env.n_bits=4",
            "--set", "policy.features_extractor_kwargs={cnn_output_dim = 8}", "--set", "policy.net_arch=[16]",
            "--set", "learning_starts=50", "--set", "batch_size=16", "--set", "checkpoint.freq=100",
            "--set", "eval.freq=100", "--set", "eval.episodes=2", "--set", "exploration_fraction=0", "--progress", "off"]
    assert herl("train", *args, "--timesteps", "300", "--run-dir", tmp_path / "whole") == 0
    assert herl("train", *args, "--timesteps", "150", "--run-dir", tmp_path / "parts") == 0
    assert herl("train", "--resume", tmp_path / "parts", "--timesteps", "300", "--progress", "off") == 0
    whole = OffPolicyAlgorithm.load(tmp_path / "whole" / "seed_0" / "model.zip")
    resumed = OffPolicyAlgorithm.load(tmp_path / "parts" / "seed_0" / "model.zip")
    assert whole.policy_config.features_extractor == "CombinedExtractor"
    assert (whole.num_timesteps, whole._n_updates) == (resumed.num_timesteps, resumed._n_updates) == (300, whole._n_updates)
    for name, state in whole.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                assert torch.equal(tensor, resumed.get_parameters()[name][key]), f"{name}.{key}"


def test_algorithm_names_are_taken_in_any_case() -> None:
    from herl.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["train", "--algo", "SAC", "--env", "herl/PointReach-v0"]).algo == "sac"
    assert parser.parse_args(["record", "--algo", "TQC", "--env", "FetchPush-v4", "-o", "d"]).algo == "tqc"
