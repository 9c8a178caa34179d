"""The herl command under real use: stopped by a signal, damaged run folders, settings it must not change,
env ids that import code, and the small things (plot labels, quoting, suggestions)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_cli import TINY, herl

from herl.run.checkpoint import complete_checkpoints, latest_checkpoint


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run with checkpoints at 200 and 300 steps."""
    folder = tmp_path_factory.mktemp("finished")
    assert herl("train", *TINY, "--run-dir", folder) == 0
    return folder / "seed_0"


def _logged_steps(progress: Path) -> int:
    """The env steps of the last complete row of a run's progress.csv (0 before there is one)."""
    import csv

    with contextlib.suppress(FileNotFoundError):
        text = progress.read_text()
        rows = list(csv.DictReader(text[: text.rfind("\n") + 1].splitlines()))
        steps = [int(float(r["time/total_timesteps"])) for r in rows if r.get("time/total_timesteps")]
        return max(steps, default=0)
    return 0


def _copy(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run" / "seed_0"
    shutil.copytree(run, target)
    return target


# the herl command (as its console script runs it) that sends itself its stop signal once more as it exits, after
# the stop's checkpoint: a scheduler's or a user's repeated signal
_SIGNALLED_AGAIN_AT_EXIT = """
import atexit, os, signal, sys
from herl.cli import main
atexit.register(os.kill, os.getpid(), int(sys.argv.pop(1)))
sys.exit(main())
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_writes_a_checkpoint_and_says_how_to_resume(tmp_path: Path, signum: int) -> None:
    """... and the same signal once more while the command exits leaves its exit status 130."""
    args = [*TINY, "--timesteps", "200000", "--set", "checkpoint.freq=100000", "--set", "eval.freq=0"]
    process = subprocess.Popen([sys.executable, "-c", _SIGNALLED_AGAIN_AT_EXIT, str(int(signum)), "train", *args,
                                "--run-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    run = tmp_path / "seed_0"
    deadline = time.monotonic() + 120
    while _logged_steps(run / "progress.csv") <= 100:  # trained past the step-0 checkpoint
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sent = time.monotonic()
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert time.monotonic() - sent < 15  # within seconds
    assert process.returncode == 130, err
    assert "a checkpoint was written" in err and "herl train --resume" in err
    assert "already stopping" in err  # the second signal, taken
    step = latest_checkpoint(run).step
    assert step > 100  # not only the one at step 0
    assert herl("train", "--resume", tmp_path, "--timesteps", str(step + 100), "--progress", "off") == 0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_after_a_stop_one_more_signal_is_taken_then_the_handlers_from_before(tmp_path: Path) -> None:
    from herl.run.errors import Interrupted
    from herl.run.train import StopOnSignal

    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))  # not this test's death
    try:
        with pytest.raises(Interrupted), StopOnSignal(tmp_path) as stop:
            os.kill(os.getpid(), signal.SIGTERM)  # the stop
            assert stop.requested
            raise Interrupted("stopped")
        os.kill(os.getpid(), signal.SIGTERM)  # while the process exits: taken by herl's handler
        assert received == []
        os.kill(os.getpid(), signal.SIGTERM)  # and the next one by the handler from before
        assert received == [signal.SIGTERM]
        with StopOnSignal(tmp_path):  # without a stop, the handler from before is back at once
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM] * 2
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_after_the_last_rollout_start_finishes_the_run_and_starts_no_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``herl train --seed 0 1`` in one process: a SIGTERM that arrives after seed 0's last rollout start (its training
    done, its final evaluation and files to come) lets that run finish, and seed 1 does not start."""
    from herl.run.train import RunCallback

    def signalled(callback: RunCallback) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(RunCallback, "_on_training_end", signalled, raising=False)
    assert herl("train", *TINY, "--seed", "0", "1", "--run-dir", tmp_path) == 130
    assert (tmp_path / "seed_0" / "summary.json").exists() and (tmp_path / "seed_0" / "model.zip").exists()
    assert not (tmp_path / "seed_1" / "config.json").exists()
    monkeypatch.undo()
    assert herl("train", "--resume", tmp_path) == 0  # starts seed 1
    assert (tmp_path / "seed_1" / "summary.json").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_sigterm_to_the_parent_of_parallel_seeds_reaches_every_worker(tmp_path: Path) -> None:
    """``--jobs 2``: the signal goes to the parent only (as a scheduler or `kill PID` sends it); each worker writes its
    checkpoint and stops, and the parent says where each seed resumes from."""
    args = [*TINY, "--timesteps", "200000", "--set", "checkpoint.freq=100000", "--set", "eval.freq=0"]
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--seed", "0", "1", "--jobs", "2",
                                "--run-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    runs = [tmp_path / "seed_0", tmp_path / "seed_1"]
    deadline = time.monotonic() + 600  # two spawned interpreters importing torch on a loaded machine
    while not all((run / "progress.csv").exists() and (run / "progress.csv").stat().st_size > 200 for run in runs):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        for run in runs:  # the workers have process groups of their own: stop them by the pid their lock names
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int((run / "train.pid").read_text()), signal.SIGKILL)
        raise
    # promptly: a few seconds on an idle machine (the limit leaves room for a loaded one, where a worker at the lowest
    # priority gets a few percent of a core)
    assert time.monotonic() - sent < 180
    assert process.returncode == 130, err
    for run in runs:
        step = latest_checkpoint(run).step
        assert step > 0  # written on the signal (checkpoint.freq is 100,000), not the one at step 0
        assert f"{run}: resumes from step {step:,}" in err
        fcntl = pytest.importorskip("fcntl")
        with open(run / "train.pid") as lock:  # no worker holds its run any more: each one has exited
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert f"herl train --resume {tmp_path}" in err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_while_finished_workers_exit_is_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM in the last moment of ``--jobs``, every run finished and the pool waiting for its workers to exit:
    the command ends with its results, rather than die of the signal (exit 143, no summary)."""
    from concurrent.futures import ProcessPoolExecutor

    from herl.run import train

    shutdown = ProcessPoolExecutor.shutdown

    def signalled_shutdown(pool, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, while the pool shuts down
        return shutdown(pool, *args, **kwargs)

    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))  # not this test's death
    try:
        monkeypatch.setattr(ProcessPoolExecutor, "shutdown", signalled_shutdown)
        # dict(**kwargs, position=i) stands for a run: a function a spawned worker can import
        results = train.run_parallel([(dict, {"seed": 0}), (dict, {"seed": 1})], 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert results == [{"seed": 0, "position": 0}, {"seed": 1, "position": 1}]
    assert received == []  # the command's own handler took it, and let the finished command end


def _worker_killed(run_dir: str, position: int) -> None:
    """A --jobs run whose process dies as under kill -9 or the OOM killer (no exception, no clean-up)."""
    os._exit(137)


def test_a_worker_process_that_dies_is_said_with_where_each_run_resumes(tmp_path: Path) -> None:
    from herl.run import train
    from herl.run.errors import Interrupted

    with pytest.raises(Interrupted, match="a worker process died") as stop:
        train.run_parallel([(_worker_killed, {"run_dir": str(tmp_path / "seed_0")}),
                            (_worker_killed, {"run_dir": str(tmp_path / "seed_1")})], 2)
    assert f"herl train --resume {tmp_path}" in str(stop.value) and "seed_1: not started" in str(stop.value)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_workers_whose_parent_is_killed_write_a_checkpoint_and_exit(tmp_path: Path) -> None:
    """``--jobs 2`` killed with SIGKILL (nothing to pass on): each worker notices its parent is gone, writes its
    checkpoint, releases its run and exits, and the folder resumes (the third seed, queued, starts or resumes then)."""
    args = [*TINY, "--timesteps", "200000", "--set", "checkpoint.freq=100000", "--set", "eval.freq=0"]
    process = subprocess.Popen([sys.executable, "-m", "herl", "train", *args, "--seed", "0", "1", "2", "--jobs", "2",
                                "--run-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    runs = [tmp_path / "seed_0", tmp_path / "seed_1"]
    deadline = time.monotonic() + 600
    while not all((run / "progress.csv").exists() and (run / "progress.csv").stat().st_size > 200 for run in runs):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    workers = [int((run / "train.pid").read_text()) for run in runs]
    process.kill()
    process.communicate()
    deadline = time.monotonic() + 180
    while any(_alive(pid) for pid in workers):
        if time.monotonic() > deadline:
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError("a worker outlived its parent")
        time.sleep(0.1)
    for run in runs:
        assert latest_checkpoint(run).step > 0  # written when the parent was found gone
    done = max(c.step for run in tmp_path.glob("seed_*") if (c := latest_checkpoint(run)) is not None)
    assert herl("train", "--resume", tmp_path, "--timesteps", done + 200) == 0  # a little more than any seed has
    assert all((tmp_path / f"seed_{seed}" / "summary.json").exists() for seed in range(3))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    return True


def test_an_explicit_buffer_size_is_kept_and_a_chosen_one_is_said(tmp_path: Path) -> None:
    assert herl("train", *TINY, "--timesteps", "200", "--set", "buffer_size=50000", "--set",
                "target_update_interval=50", "--run-dir", tmp_path / "a") == 0
    config = json.loads((tmp_path / "a" / "seed_0" / "config.json").read_text())
    assert config["hyperparameters"]["buffer_size"] == 50_000
    assert json.loads((tmp_path / "a" / "seed_0" / "summary.json").read_text())["notes"] == []
    assert herl("train", *TINY, "--timesteps", "200", "--run-dir", tmp_path / "b") == 0
    notes = json.loads((tmp_path / "b" / "seed_0" / "summary.json").read_text())["notes"]
    assert notes and "buffer_size=10,000 chosen by herl" in notes[0]


def test_a_run_too_short_to_update_or_to_copy_dqns_target_says_so(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", *TINY, "--timesteps", "100", "--set", "buffer_size=1000", "--run-dir", tmp_path / "a") == 0
    assert "note: learning_starts=100 is not below timesteps=100: this run collects and never updates" in \
        capsys.readouterr().err
    assert herl("train", *TINY, "--set", "target_update_interval=300", "--set", "buffer_size=1000",
                "--run-dir", tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert "note: target_update_interval=300 env steps is not below timesteps=300: DQN's target network is never " \
        "copied" in err and "learning_starts" not in err
    notes = json.loads((tmp_path / "b" / "seed_0" / "summary.json").read_text())["notes"]
    assert any(note.startswith("target_update_interval=300") for note in notes)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and locks")
def test_links_in_a_run_folder_never_lead_writes_or_deletions_outside_it(finished: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A run folder from elsewhere: its lock file a link to a file of the user's, or its checkpoints a link to a folder
    of the user's. Resuming (or training into a fresh folder holding such a lock) refuses, and leaves them as they were."""
    victim = tmp_path / "notes.txt"
    victim.write_text("my notes")
    run = _copy(finished, tmp_path)
    (run / "train.pid").unlink(missing_ok=True)
    (run / "train.pid").symlink_to(victim)
    assert herl("train", "--resume", run.parent) == 2
    assert "is a symbolic link" in capsys.readouterr().err and victim.read_text() == "my notes"
    fresh = tmp_path / "fresh" / "seed_0"
    fresh.mkdir(parents=True)
    (fresh / "train.pid").symlink_to(tmp_path / "created_by_herl.txt")
    assert herl("train", *TINY, "--run-dir", fresh.parent) == 2
    assert not (tmp_path / "created_by_herl.txt").exists()
    (run / "train.pid").unlink()
    os.link(victim, run / "train.pid")  # a hard link: the same file under another name
    assert herl("train", "--resume", run.parent) == 2
    assert "hard link" in capsys.readouterr().err and victim.read_text() == "my notes"
    (run / "train.pid").unlink()

    outside = tmp_path / "photos"
    shutil.move(run / "checkpoints", outside)
    (outside / ".tmp-album").mkdir()
    (run / "checkpoints").symlink_to(outside, target_is_directory=True)
    before = sorted(p.name for p in outside.iterdir())
    assert herl("train", "--resume", run.parent, "--timesteps", "400") == 2
    assert "checkpoints is a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in outside.iterdir()) == before


def test_a_damaged_latest_json_falls_back_to_the_newest_complete_checkpoint(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    pointer = run / "checkpoints" / "latest.json"
    newest = complete_checkpoints(run)[0]
    for text in ["{not json", json.dumps({"step": 1, "path": "../../../etc"}), json.dumps({"step": "x", "path": 3})]:
        pointer.write_text(text)
        with pytest.warns(UserWarning, match="resuming from"):
            assert latest_checkpoint(run) == newest


def test_a_damaged_latest_json_is_said_once_as_one_line_of_the_command(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    (run / "checkpoints" / "latest.json").write_text("{not json")
    (run / "summary.json").unlink()
    # a process of its own: pytest records the warnings of a command run in its process, rather than let them print
    done = subprocess.run([sys.executable, "-m", "herl", "train", "--resume", str(run), "--timesteps", "400",
                           "--progress", "off"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    said = [line for line in err.splitlines() if "latest.json is not usable" in line]
    assert len(said) == 1 and said[0].startswith("herl train: warning: "), err  # not Python's two-line form
    assert "UserWarning" not in err and latest_checkpoint(run).step == 400


def test_a_truncated_checkpoint_falls_back_to_the_previous_one(finished: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path)
    newest, previous = complete_checkpoints(run)[:2]
    model = newest.path / "model.zip"
    model.write_bytes(model.read_bytes()[:1000])
    (run / "summary.json").unlink()
    (run / "model.zip").unlink()
    (run / ".config.json.abc123.tmp").write_text("left by a killed process")
    (run / "checkpoints" / ".latest.json.x.tmp").write_text("")
    assert herl("train", "--resume", run, "--timesteps", "400", "--progress", "off") == 0
    err = capsys.readouterr().err
    assert f"checkpoint {newest.path} cannot be loaded" in err and f"from {previous.path.name}" in err
    assert not list(run.glob(".*.tmp")) and not list((run / "checkpoints").glob(".*.tmp"))
    assert latest_checkpoint(run).step == 400


def test_a_deleted_checkpoint_falls_back_to_the_previous_one(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    newest, previous = complete_checkpoints(run)[:2]
    shutil.rmtree(newest.path)  # latest.json still names it
    with pytest.warns(UserWarning, match=f"resuming from {previous.path.name}"):
        assert latest_checkpoint(run) == previous


def test_a_damaged_config_json_is_reported(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path)
    for text in ["{", "[1, 2]", json.dumps({**json.loads((finished / "config.json").read_text()), "timesteps": "x"})]:
        (run / "config.json").write_text(text)
        assert herl("train", "--resume", run, "--progress", "off") == 2
        assert "config.json is damaged" in capsys.readouterr().err


def test_eval_asks_before_importing_a_module_a_run_config_names(finished: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run = _copy(finished, tmp_path)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "env": "not_imported_yet_herl_test:BitFlipping-v0"}))
    assert herl("eval", run, "--episodes", "1") == 2
    err = capsys.readouterr().err  # a module Python cannot find: no question to ask, the fix is where it is
    assert "module 'not_imported_yet_herl_test' is not found from here: add the folder that holds it to PYTHONPATH" in err
    assert "--env not_imported_yet_herl_test:BitFlipping-v0" in err
    (tmp_path / "not_imported_yet_herl_test.py").write_text("")  # now findable: asked (no terminal: refused)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert herl("eval", run, "--episodes", "1") == 2
    err = capsys.readouterr().err
    assert "imports the Python module 'not_imported_yet_herl_test'" in err and "--env" in err
    assert "not_imported_yet_herl_test" not in sys.modules


def test_resume_asks_before_importing_a_module_a_run_config_names(finished: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same question as eval's, on the same code path; --env with the run's own id is the scripted "yes"."""
    run = _copy(finished, tmp_path)
    (tmp_path / "herl_trust_probe.py").write_text("")  # an importable module that registers nothing
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = "herl_trust_probe:herl/BitFlipping-v0"
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "env": env_id}))
    assert herl("train", "--resume", run.parent, "--progress", "off") == 2  # no terminal to ask: refused
    err = capsys.readouterr().err
    assert "imports the Python module 'herl_trust_probe'" in err and f"--env {env_id}" in err
    assert "herl_trust_probe" not in sys.modules
    assert herl("train", "--resume", run, "--env", "herl/BitFlipping-v0", "--progress", "off") == 2
    assert "--env only confirms that id" in capsys.readouterr().err
    # at a terminal: asked, and the answer is honoured
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert herl("train", "--resume", run, "--progress", "off") == 2
    assert herl("train", "--resume", run, "--timesteps", "400", "--progress", "off") == 0
    assert latest_checkpoint(run).step == 400
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    sys.modules.pop("herl_trust_probe", None)
    assert herl("train", "--resume", run, "--env", env_id, "--timesteps", "500", "--progress", "off") == 0
    assert latest_checkpoint(run).step == 500


@pytest.mark.parametrize(("setting", "message"), [
    ("policy.net_arch=64", "net_arch=64"), ("batch_size=1e400", "batch_size=inf"), ("learning_rate=nan", "nan"),
    ("env.n_bits=abc", "could not be made with env.n_bits='abc'"),
    ("buffer_size=" + "1" * 5000, "holds a whole number of more than 4,300 digits"),
])
def test_bad_settings_stop_the_command_with_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], setting,
                                                        message) -> None:
    assert herl("train", *TINY, "--set", setting, "--run-dir", tmp_path) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "seed_0" / "config.json").exists()


def test_eval_names_the_env_setting_at_fault(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelled env setting is named alone (not the run's own valid ones beside it), with the closest name; a
    valid one that changes the spaces is named in the mismatch, with --set as the fix."""
    assert herl("eval", finished, "--episodes", "1", "--set", "env.n_bits=4", "--set", "env.n_bitz=3") == 2
    err = capsys.readouterr().err
    assert "takes no env.n_bitz (did you mean env.n_bits?)" in err and "env.n_bits," not in err
    assert herl("eval", finished, "--episodes", "1", "--set", "env.n_bits=11") == 2
    err = capsys.readouterr().err
    assert "was not trained on herl/BitFlipping-v0 made with env.n_bits=11" in err and "--set env.NAME=VALUE" in err


def test_a_run_folder_that_is_not_there_is_said_to_be_missing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "runs" / "typo"
    for command in (["plot", missing, "-o", tmp_path / "x.png"], ["train", "--resume", missing]):
        assert herl(*command) == 2
        assert f"{missing} does not exist" in capsys.readouterr().err
    missing.mkdir(parents=True)  # there, but not a run
    assert herl("plot", missing, "-o", tmp_path / "x.png") == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_a_her_buffer_too_small_for_an_episode_is_refused_before_training(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("train", "--env", "herl/PointReach-v0", "--algo", "sac", "--set", "buffer_size=20", "--progress",
                "off", "--run-dir", tmp_path) == 2
    assert "cannot hold one whole episode of 50 steps" in capsys.readouterr().err


def test_plot_labels_may_follow_one_flag(finished: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = finished.parent
    assert herl("plot", runs, runs, "--label", "A", "B", "-o", tmp_path / "a.png") == 0
    assert herl("plot", runs, runs, "--label", "A", "--label", "B", "-o", tmp_path / "b.png") == 0


def test_an_unknown_id_of_a_known_package_suggests_the_module_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert herl("check-env", "parking-v0") == 2
    assert "did you mean highway_env:parking-v0?" in capsys.readouterr().err


def test_the_licence_is_an_spdx_string() -> None:
    """setuptools deprecates the licence table and said so three times per `pip install` (PEP 639's string form)."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert not any("License ::" in c for c in project.get("classifiers", []))  # PEP 639 forbids both


def test_printed_commands_are_shell_quoted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "with space"
    assert herl("train", *TINY, "--timesteps", "100", "--run-dir", folder) == 0
    assert f"herl plot '{folder}'" in capsys.readouterr().out


def test_the_rate_shown_after_an_evaluation_is_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from herl.run import progress as progress_module
    from herl.run.progress import Progress

    now = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    bar = Progress(total=10_000, mode="off")
    bar.mode = "log"  # measure without printing a bar
    monkeypatch.setattr(bar, "_line", lambda step: None)
    for step in range(1, 1001):  # 1000 steps/s
        now[0] += 0.001
        bar.update(step)
    now[0] += 30.0  # an evaluation of 30 s
    bar.restart_rate()  # what RunCallback does after it
    now[0] += 0.6
    bar.update(1600)
    # 1000 fps; without restart_rate, 600 steps over the evaluation's 30.6 s: "20 fps" (shown as "0 fps" when the
    # evaluation took minutes)
    assert 900 < bar._fps < 1100


def test_plot_refuses_a_missing_folder_and_makes_none(finished: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    output = tmp_path / "missing" / "deeper" / "x.png"
    assert herl("plot", finished, "-o", output) == 2
    err = capsys.readouterr().err
    assert f"the folder {output.parent} does not exist: create it first" in err and "choose another -o" in err
    assert not (tmp_path / "missing").exists()
    assert herl("plot", finished, "-o", tmp_path / "x.notanimage") == 2
    assert "matplotlib cannot write '.notanimage' images" in capsys.readouterr().err


def test_a_plot_that_fails_midway_leaves_the_previous_image(finished: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    output = tmp_path / "curves.svg"
    assert herl("plot", finished, "-o", output) == 0
    before = output.read_bytes()
    assert before.lstrip().startswith(b"<?xml")  # the format follows the name's suffix

    def full_disk(self, fname, **kwargs):  # what matplotlib does when the disk fills as it writes
        Path(fname).write_bytes(b"<svg half written")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    assert herl("plot", finished, "-o", output) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert output.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["curves.svg"]


def test_the_default_run_folder_name_holds_no_slash_or_colon() -> None:
    from herl.run.train import default_run_dir

    for env_id in ("herl/BitFlipping-v0", "my_envs.reach:LineReach-v0", "FetchReach-v4"):
        folder = default_run_dir(env_id, "sac")
        assert folder.parent == Path("runs") and "/" not in folder.name and ":" not in folder.name
        assert folder.name.startswith(env_id.replace("/", "_").replace(":", "_") + "_sac_")


def test_settings_a_run_never_reads_are_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Given by the user, HER's settings with HER off and the noise's without noise are accepted with a note (printed
    and kept in config.json); a preset's own tables, which cover every algorithm, are not noted."""
    assert herl("train", "--env", "herl/BitFlipping-v0", "--no-her", "--timesteps", "100", "--progress", "off",
                "--run-dir", tmp_path / "plain") == 0
    assert "no effect" not in capsys.readouterr().out
    assert herl("train", "--env", "herl/BitFlipping-v0", "--no-her", "--set", "her.strategy=final", "--set",
                "noise.sigma=0.3", "--timesteps", "100", "--progress", "off", "--run-dir", tmp_path / "noted") == 0
    out = capsys.readouterr().out
    assert "her.strategy set, but this run trains without HER: it has no effect" in out
    assert "noise.sigma set, but dqn explores without added noise here (noise.type=none): no effect" in out
    notes = json.loads((tmp_path / "noted" / "seed_0" / "config.json").read_text())["notes"]
    assert sum("no effect" in note for note in notes) == 2


def test_a_run_refused_when_its_model_is_built_leaves_no_folder(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Settings that pass the command line's checks but not the model's: the folders the command made are gone, so
    the corrected command may use the same --run-dir; a folder that was there before stays."""
    bad = ["--env", "herl/PointReach-v0", "--timesteps", "200", "--progress", "off", "--set", "n_steps=3",
           "--set", "her.online_sampling=false"]
    assert herl("train", *bad, "--run-dir", tmp_path / "new" / "run") == 2
    assert "use online_sampling=True with n_steps > 1" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    assert herl("train", *bad, "--run-dir", tmp_path / "mine") == 2
    assert (tmp_path / "mine").is_dir() and not list((tmp_path / "mine").iterdir())
    assert herl("train", *bad[:-2], "--run-dir", tmp_path / "new" / "run") == 0  # corrected: same folder


@pytest.mark.parametrize("argv, message", [
    (["train", "--env", "herl/BitFlipping-v0", "--timesteps", "1e400"], "expected a whole number, got '1e400'"),
    (["train", "--env", "herl/BitFlipping-v0", "--timesteps", "2.5e0"], "expected a whole number, got '2.5e0'"),
    (["train", "--env", "herl/BitFlipping-v0", "--device", "tpu"], "'tpu' is no torch device"),
    (["eval", "runs/x", "--device", "tpu"], "'tpu' is no torch device"),
    (["export", "runs/x", "-o", "x.onnx", "--device", "cpu:x"], "'cpu:x' is no torch device"),
])
def test_bad_flag_values_are_the_flags_fault(argv, message, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        herl(*argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_whole_numbers_in_e_notation_are_taken() -> None:
    from herl.cli import _positive_int

    assert _positive_int("1e6") == 1_000_000 and _positive_int("2.5e1") == 25 and _positive_int("300") == 300


def test_resume_starts_the_seeds_a_stopped_command_never_reached(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A command of several seeds records them (seeds.json) before the first starts. Stopped before a seed started
    (its folder missing, or holding only the lock a kill -9 left), `--resume` of the folder starts it, with the
    settings the command gave it: the same run as one never stopped."""
    from test_cli import assert_same_weights_and_optimizer_states

    from herl import DQN

    assert herl("train", *TINY, "--seed", "0", "1", "2", "--run-dir", tmp_path / "whole") == 0
    stopped = tmp_path / "stopped"
    assert herl("train", *TINY, "--seed", "0", "1", "2", "--run-dir", stopped) == 0
    assert (stopped / "seeds.json").is_file()
    shutil.rmtree(stopped / "seed_1")  # never started
    for entry in (stopped / "seed_2").iterdir():  # killed before its settings were written: the lock alone left
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (stopped / "seed_2" / "train.pid").write_text("12345")
    capsys.readouterr()
    assert herl("train", "--resume", stopped) == 0
    out = capsys.readouterr().out
    assert "resuming 3 runs" in out and "(2 of them not started before: seed_1, seed_2)" in out
    for seed in ("seed_1", "seed_2"):
        assert_same_weights_and_optimizer_states(DQN.load(tmp_path / "whole" / seed / "model.zip"),
                                                 DQN.load(stopped / seed / "model.zip"))
    (stopped / "seeds.json").write_text("{not json")
    assert herl("train", "--resume", stopped) == 2
    assert "seeds.json is damaged" in capsys.readouterr().err


def test_default_run_folders_of_one_second_are_not_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The default folder is named to the second: commands started in the same second get one each."""
    import herl.run.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train.time, "strftime", lambda fmt: "20261129-120000")
    for _ in range(3):
        assert herl("train", *TINY) == 0
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == ["herl_BitFlipping-v0_dqn_20261129-120000", "herl_BitFlipping-v0_dqn_20261129-120000_2",
                     "herl_BitFlipping-v0_dqn_20261129-120000_3"]
    assert all((tmp_path / "runs" / name / "seed_0" / "model.zip").exists() for name in names)


def test_file_system_refusals_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("mine")
    for run_dir in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        assert herl("train", *TINY, "--run-dir", run_dir) == 2
        assert "afile is a file, not a folder: choose another --run-dir" in capsys.readouterr().err
    assert (tmp_path / "afile").read_text() == "mine"
    import errno

    import herl.run.train as train

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "seed_0" / "progress.csv"))

    monkeypatch.setattr(train, "_start", full_disk)
    assert herl("train", *TINY, "--run-dir", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"herl train: error: No space left on device: {tmp_path / 'run' / 'seed_0' / 'progress.csv'}"
    assert "Traceback" not in err


@pytest.mark.parametrize("command", [["eval", "runs/x"], ["train", "--env", "herl/BitFlipping-v0"]])
def test_a_negative_seed_is_the_flags_fault(command, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        herl(*command, "--seed", "-5")
    assert "a seed is a whole number >= 0, got -5" in capsys.readouterr().err


def test_plot_names_a_progress_file_holding_no_number(finished: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path)
    progress = run / "progress.csv"
    lines = progress.read_text().splitlines()
    header = lines[0].split(",")
    column = header.index("eval/success_rate")
    row = next(i for i, line in enumerate(lines[1:], 1) if line.split(",")[column])
    cells = lines[row].split(",")
    cells[column] = "abc"
    lines[row] = ",".join(cells)
    progress.write_text("\n".join(lines) + "\n")
    assert herl("plot", run, "-o", tmp_path / "p.png") == 2
    assert "progress.csv holds a value that is no number" in capsys.readouterr().err


def test_a_settings_file_is_named_as_given_and_may_leave_the_algorithm_to_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "mine.toml"
    settings.write_text('envs = ["herl/BitFlipping-v0"]\n[her]\nn_sampled_goal = 2\n')
    assert herl("train", *TINY, "--config", settings, "--algo", "dqn", "--run-dir", tmp_path / "a") == 0
    assert herl("train", *TINY, "--config", settings, "--run-dir", tmp_path / "b") == 0  # the env's default algorithm
    settings.write_text('algo = "dqnn"\n')
    assert herl("train", *TINY, "--config", settings, "--run-dir", tmp_path / "c") == 2
    err = capsys.readouterr().err
    assert f"the settings file {settings}: algo must be one of" in err and "mine.toml.toml" not in err
    settings.write_text('algo = "dqn"\nenvs = "herl/BitFlipping-v0"\n')
    assert herl("train", *TINY, "--config", settings, "--run-dir", tmp_path / "d") == 2
    assert "envs must be a list of env ids or patterns" in capsys.readouterr().err


def test_damaged_progress_files_deep_settings_and_huge_clips_are_one_line(finished: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path / "runs")
    for damage in (b"\xff\xfe", b"a" * 200_000 + b"\n1\n"):  # not UTF-8; a field past csv's size limit
        (run / "progress.csv").write_bytes(damage)
        assert herl("plot", run, "-o", tmp_path / "curves.png") == 2
        assert "progress.csv is not a progress file herl can read" in capsys.readouterr().err
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert herl("train", "--config", deep, "--run-dir", tmp_path / "deep") == 2
    assert "nests arrays or tables too deeply" in capsys.readouterr().err
    assert herl("train", *TINY, "--set", "clip_observations=1e39", "--run-dir", tmp_path / "clip") == 2
    assert "clip_observations must be a finite number > 0 and <= 3.4e+38" in capsys.readouterr().err
    assert not (tmp_path / "clip").exists()


def test_a_negative_worker_count_or_time_limit_is_named_with_what_is_allowed(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        herl("train", *TINY, "--workers", "-1")
    assert "--workers: expected a number >= 0, got -1" in capsys.readouterr().err
    assert herl("train", *TINY, "--set", "env.max_episode_steps=-1", "--run-dir", tmp_path / "r") == 2
    assert "env.max_episode_steps is the time limit of an episode, a whole number >= 1" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
