"""herl on Ray: sweeps (Ray Tune + Optuna), trials resumed after their process is killed, many-worker collection,
and the errors for bad input. A real local Ray with 2 CPUs, started once for the module (herl[ray] is in the test
extra); the tests of what happens without Ray import nothing of it."""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from herl.cli import main
from herl.run.checkpoint import latest_checkpoint
from herl.run.errors import CLIError

# Ray starts a local cluster per test module and its tests train through it: the slow set (`make test-slow`)
pytestmark = pytest.mark.slow

# Bit flipping with 4 bits: episodes of at most 4 steps, learned by DQN + HER in about a thousand steps.
BITS = ["--env", "herl/BitFlipping-v0", "--set", "env.n_bits=4", "--set", "learning_starts=200",
        "--set", "policy.net_arch=[64,64]", "--set", "batch_size=64", "--set", "eval.episodes=20",
        "--set", "exploration_fraction=0.3", "--set", "target_update_interval=100", "--set", "log_interval=20"]


def herl(*args: str | os.PathLike) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def local_ray():
    import ray  # herl[ray] is in the test extra; the tests without Ray run without it

    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield ray
    ray.shutdown()


def _herl_stderr(capsys: pytest.CaptureFixture) -> str:
    """What herl wrote to stderr, without the lines Ray forwards from the module's worker processes (a worker of an
    earlier test's trial may print as it exits, at any time: ``(run_trial pid=N) ...``)."""
    lines = capsys.readouterr().err.strip().splitlines()
    return "\n".join(line for line in lines if not re.match(r"^(\x1b\[\d+m)?\(\w+ pid=\d+", line))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------------------------------
# without Ray


def test_training_without_workers_never_imports_ray(tmp_path: Path) -> None:
    code = ("import sys; from herl.cli import main; "
            f"rc = main(['train', *{BITS!r}, '--timesteps', '100', '--progress', 'off', '--run-dir', {str(tmp_path)!r}]);"
            " assert rc == 0, rc; assert 'ray' not in sys.modules, 'ray was imported'; print('no ray')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no ray" in out.stdout


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    assert herl("sweep", *BITS, "--seeds", "2") == 2
    assert "pip install 'herl[ray]'" in capsys.readouterr().err
    assert herl("train", *BITS, "--workers", "2", "--timesteps", "100", "--progress", "off") == 2
    assert "pip install 'herl[ray]'" in capsys.readouterr().err


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_unreachable_address_fails_within_seconds(address: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    start = time.perf_counter()
    assert herl("train", *BITS, "--workers", "1", "--timesteps", "100", "--progress", "off", "--address", address,
                "--run-dir", tmp_path / "run") == 2
    assert time.perf_counter() - start < 15
    err = capsys.readouterr().err
    assert address in err and "ray start --head" in err and "leave out --address" in err


def test_a_sweep_on_an_unreachable_address_leaves_no_sweep_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The corrected command (another --address, or none) then runs as it is, instead of being told to resume."""
    sweep_dir = tmp_path / "sweep"
    assert herl("sweep", *BITS, "--timesteps", "100", "--seeds", "2", "--address", "127.0.0.1:1",
                "--sweep-dir", sweep_dir) == 2
    assert "127.0.0.1:1" in capsys.readouterr().err
    assert not sweep_dir.exists()


def test_unknown_search_parameter_or_distribution_names_the_valid_ones() -> None:
    from herl.distributed.sweep import parse_search

    with pytest.raises(CLIError, match=r"unknown key 'learnin_rate'.*did you mean learning_rate.*valid keys"):
        parse_search("learnin_rate=loguniform:1e-4:1e-3", "dqn")
    with pytest.raises(CLIError, match=r"unknown distribution 'lognormal'.*uniform:LOW:HIGH.*loguniform.*choice:A,B"):
        parse_search("learning_rate=lognormal:1e-4:1e-3", "dqn")
    with pytest.raises(CLIError, match="LOW must be below HIGH and above 0"):
        parse_search("learning_rate=loguniform:0:1e-3", "dqn")
    with pytest.raises(CLIError, match="LOW and HIGH must be finite numbers"):
        parse_search("learning_rate=uniform:1:1e400", "dqn")
    assert parse_search("batch_size=choice:32,64", "dqn").args == (32, 64)
    assert parse_search("policy.net_arch=choice:[32,32],[64,64]", "dqn").args == ([32, 32], [64, 64])


# ---------------------------------------------------------------------------------------------------------------------
# sweeps


@pytest.fixture(scope="module")
def seed_sweep(local_ray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep of the bit flipping settings over 2 seeds, trained in parallel on the local Ray."""
    sweep_dir = tmp_path_factory.mktemp("sweeps") / "bits"
    assert herl("sweep", *BITS, "--timesteps", "600", "--set", "eval.freq=200", "--seeds", "2",
                "--sweep-dir", sweep_dir) == 0
    return sweep_dir


def test_seed_sweep_runs_every_trial_to_completion(seed_sweep: Path, capsys: pytest.CaptureFixture) -> None:
    rows = _rows(seed_sweep / "summary.csv")
    assert sorted(r["run"] for r in rows) == ["runs/seed_0", "runs/seed_1"]
    assert all(r["status"] == "done" and r["steps"] == "600" for r in rows)
    finals = [float(r["final eval/success_rate"]) for r in rows]
    assert finals == sorted(finals, reverse=True)  # best first
    for seed in (0, 1):  # each trial an ordinary run folder
        run = seed_sweep / "runs" / f"seed_{seed}"
        assert json.loads((run / "config.json").read_text())["seed"] == seed
        assert (run / "model.zip").exists() and latest_checkpoint(run).step == 600
    assert herl("plot", seed_sweep / "runs", "-o", seed_sweep / "curves.png") == 0


def test_best_settings_are_a_preset_that_herl_train_accepts(seed_sweep: Path, tmp_path: Path) -> None:
    best = seed_sweep / "best.toml"
    assert 'envs = ["herl/BitFlipping-v0"]' in best.read_text()
    assert herl("train", "--config", best, "--timesteps", "100", "--set", "eval.freq=0", "--progress", "off",
                "--run-dir", tmp_path / "again") == 0
    config = json.loads((tmp_path / "again" / "seed_0" / "config.json").read_text())
    assert config["env"] == "herl/BitFlipping-v0" and config["env_kwargs"] == {"n_bits": 4}
    assert config["hyperparameters"]["batch_size"] == 64 and config["policy"]["net_arch"] == [64, 64]


def test_a_sweep_folder_of_another_env_or_preset_is_refused(seed_sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert herl("sweep", "--resume", seed_sweep, "--env", "herl/PointReach-v0") == 2
    assert "is a sweep of herl/BitFlipping-v0 (preset bit_flipping), not of env herl/PointReach-v0" in capsys.readouterr().err
    assert herl("sweep", "--resume", seed_sweep, "--preset", "point_reach") == 2
    assert "not of preset point_reach" in capsys.readouterr().err
    assert herl("sweep", "--env", "herl/PointReach-v0", "--seeds", "2", "--sweep-dir", seed_sweep) == 2
    assert "already holds a sweep of herl/BitFlipping-v0" in capsys.readouterr().err


def test_resuming_a_finished_sweep_redoes_no_trial(seed_sweep: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in seed_sweep.glob("runs/*/model.zip")}
    assert herl("sweep", "--resume", seed_sweep) == 0
    assert {p: p.stat().st_mtime_ns for p in seed_sweep.glob("runs/*/model.zip")} == before
    assert len(_rows(seed_sweep / "summary.csv")) == 2


def test_search_with_optuna_and_asha(local_ray, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep_dir = tmp_path / "search"
    assert herl("sweep", *BITS, "--timesteps", "400", "--set", "eval.freq=200", "--search",
                "learning_rate=loguniform:1e-4:3e-3", "--search", "batch_size=choice:32,64", "--trials", "2",
                "--sweep-dir", sweep_dir) == 0
    # the curves hint draws each trial as its own curve, labelled by its settings (not the trials as seeds of one)
    hint = next(line for line in capsys.readouterr().out.splitlines() if "curves of the best 2: herl plot " in line)
    plot = shlex.split(hint.partition("herl plot ")[2])
    assert sorted(plot[:2]) == sorted(str(run) for run in (sweep_dir / "runs").glob("trial_*"))
    assert plot[2] == "--label" and all(label.startswith("learning_rate=") for label in plot[3:])
    assert herl("plot", *plot, "-o", tmp_path / "curves.png") == 0
    rows = _rows(sweep_dir / "summary.csv")
    assert len(rows) == 2 and all(r["run"].startswith("runs/trial_") for r in rows)
    for row in rows:
        assert 1e-4 <= float(row["learning_rate"]) <= 3e-3 and row["batch_size"] in ("32", "64")
        config = json.loads((sweep_dir / row["run"] / "config.json").read_text())
        assert config["hyperparameters"]["learning_rate"] == pytest.approx(float(row["learning_rate"]))
    best = rows[0]
    assert f"learning_rate = {float(best['learning_rate'])!r}"[:20] in (sweep_dir / "best.toml").read_text()


def test_a_killed_trial_resumes_from_its_checkpoint(local_ray, tmp_path: Path) -> None:
    """SIGKILL the process training a trial once it has a checkpoint: Tune retries the trial, which resumes the
    run folder from that checkpoint (not from step 0) and finishes it."""
    sweep_dir = tmp_path / "killed"
    run = sweep_dir / "runs" / "seed_0"
    killed: dict[str, int] = {}

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            last = latest_checkpoint(run) if (run / "checkpoints").exists() else None
            pid = (run / "train.pid").read_text().strip() if (run / "train.pid").exists() else ""
            if last is not None and pid.isdigit():
                killed.update(pid=int(pid), step=last.step)
                os.kill(int(pid), signal.SIGKILL)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    watcher.start()
    assert herl("sweep", *BITS, "--timesteps", "3000", "--set", "eval.freq=500", "--set", "checkpoint.freq=300",
                "--seeds", "1", "--sweep-dir", sweep_dir) == 0
    watcher.join(timeout=5)
    assert killed, "the trial finished before it could be killed"
    (row,) = _rows(sweep_dir / "summary.csv")
    assert row["status"] == "done" and row["steps"] == "3000"
    assert int(row["resumed from step"]) >= killed["step"] > 0  # from its checkpoint, not from scratch
    assert int((run / "train.pid").read_text()) != killed["pid"]
    assert (run / "model.zip").exists()


class _Payload:
    """A pickle whose loading creates ``marker``: what a crafted file in a shared sweep folder could hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant_pickles(sweep_dir: Path, marker: Path) -> list[Path]:
    """Every pickle Ray Tune would read to restore the sweep, replaced by (or added as) a payload."""
    payload = pickle.dumps(_Payload(marker))
    tune_dir = sweep_dir / "tune"
    planted = [*tune_dir.rglob("*.pkl"), tune_dir / "tuner.pkl", tune_dir / "searcher-state-2099-01-01_00-00-00.pkl",
               tune_dir / "run_trial_00000" / "params.pkl"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
    state = {"trial_data": [[json.dumps({"trial_id": "00000"}), payload.hex()]], "runner_data": {}}
    (tune_dir / "experiment_state-2099-01-01_00-00-00.json").write_text(json.dumps(state))
    with open(planted[1], "rb") as f:  # the payload works: loading it does create the marker
        pickle.load(f)
    assert marker.exists()
    marker.unlink()
    return planted


def test_a_killed_sweep_resumes_from_herls_record_and_never_unpickles_tunes_files(local_ray, tmp_path: Path) -> None:
    """SIGKILL a search's driver (herl sweep) once a trial has a checkpoint; plant pickles that create a file when
    loaded wherever Tune keeps its state; herl sweep --resume finishes every trial from herl's JSON record and run
    folders, and loads none of them."""
    sweep_dir, marker = tmp_path / "search", tmp_path / "unpickled"
    args = ["sweep", *BITS, "--timesteps", "1200", "--set", "eval.freq=300", "--set", "checkpoint.freq=300",
            "--search", "learning_rate=loguniform:1e-4:3e-3", "--trials", "2", "--sweep-dir", str(sweep_dir),
            "--address", local_ray.get_runtime_context().gcs_address]  # a second driver on the module's Ray
    code = f"import sys; from herl.cli import main; sys.exit(main({args!r}))"
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    checkpointed: dict[str, int] = {}
    deadline = time.monotonic() + 300
    while not checkpointed and driver.poll() is None and time.monotonic() < deadline:
        for run in sweep_dir.glob("runs/trial_*"):
            last = latest_checkpoint(run) if (run / "checkpoints").exists() else None
            if last is not None and last.step > 0:
                checkpointed[run.name] = last.step
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    assert checkpointed, f"no checkpoint before the sweep ended: {(tmp_path / 'driver.log').read_text()[-3000:]}"
    # the trials' processes die with their driver; wait until they have let go of their run folders
    pids = [int(t) for t in (p.read_text().strip() for p in sweep_dir.glob("runs/*/train.pid")) if t.isdigit()]
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    record = json.loads((sweep_dir / "trials.json").read_text())
    assert {t["run"] for t in record["trials"]} >= set(checkpointed)
    assert all(t["status"] in ("pending", "running") for t in record["trials"] if t["run"] in checkpointed)
    _plant_pickles(sweep_dir, marker)

    assert herl("sweep", "--resume", sweep_dir) == 0
    assert not marker.exists(), "herl sweep --resume loaded a pickle from the sweep folder"
    rows = {r["run"].removeprefix("runs/"): r for r in _rows(sweep_dir / "summary.csv")}
    assert len(rows) == 2
    for name, step in checkpointed.items():  # resumed from its checkpoint, not from scratch
        assert int(rows[name]["resumed from step"] or 0) >= step
    for row in rows.values():
        assert row["status"] in ("done", "stopped early")
        assert row["status"] == "stopped early" or row["steps"] == "1200"
    record = json.loads((sweep_dir / "trials.json").read_text())
    for trial in record["trials"]:  # each run folder trained the settings the record says
        config = json.loads((sweep_dir / "runs" / trial["run"] / "config.json").read_text())
        assert config["hyperparameters"]["learning_rate"] == pytest.approx(trial["params"]["learning_rate"])
        # and holds a model to evaluate, a trial stopped early by the scheduler too (the one of its last report)
        assert (sweep_dir / "runs" / trial["run"] / "model.zip").is_file()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_a_crafted_sweep_folder_is_refused_before_anything_runs(seed_sweep: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "unpickled"
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    spec = json.loads((seed_sweep / "sweep.json").read_text())
    (crafted / "sweep.json").write_text(json.dumps({**spec, "env": "evilmod:Evil-v0"}))
    _plant_pickles(crafted, marker)
    # the env's module would run its code when imported: refused without a terminal to ask, unless --env names it
    imported = tmp_path / "evilmod_ran"
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "evilmod.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    assert herl("sweep", "--resume", crafted) == 2
    err = _herl_stderr(capsys)
    assert len(err.splitlines()) == 1 and err.startswith("herl sweep: error: ")
    assert "imports the Python module 'evilmod'" in err and "--env evilmod:Evil-v0" in err
    assert "evilmod" not in sys.modules and not imported.exists()

    # a record of trials naming folders outside runs/
    (crafted / "sweep.json").write_text(json.dumps(spec))
    trials = {"version": 1, "trials": [{"run": "../../elsewhere", "seed": 0, "params": {}, "status": "running",
                                        "resumed_from": 0}]}
    (crafted / "trials.json").write_text(json.dumps(trials))
    assert herl("sweep", "--resume", crafted) == 2
    err = _herl_stderr(capsys)
    assert len(err.splitlines()) == 1 and "trials.json is damaged" in err and "is not a trial folder name" in err

    # a search begun by an older herl, whose trials only Tune's pickles recorded
    search = {**spec, "search": ["learning_rate=loguniform:0.0001:0.003"], "trials": 2, "seeds": [0]}
    (crafted / "sweep.json").write_text(json.dumps(search))
    (crafted / "trials.json").unlink()
    (crafted / "runs" / "trial_4f2a1_00000").mkdir(parents=True)
    assert herl("sweep", "--resume", crafted) == 2
    err = _herl_stderr(capsys)
    assert len(err.splitlines()) == 1 and "has no trials.json" in err and "herl train --resume" in err
    assert not marker.exists()


def test_a_new_sweep_takes_no_foreign_runs_and_checks_every_searched_value(seed_sweep: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    """Runs already in DIR/runs would be taken for trials (a PointReach run reported as a bit flipping trial); a
    searched value that no trial could train with is refused before anything runs, not in a failing trial."""
    import shutil

    occupied = tmp_path / "occupied"
    shutil.copytree(seed_sweep / "runs" / "seed_0", occupied / "runs" / "seed_0")
    assert herl("sweep", *BITS, "--timesteps", "200", "--sweep-dir", occupied) == 2
    assert "holds runs already" in _herl_stderr(capsys) and not (occupied / "sweep.json").exists()
    assert herl("sweep", *BITS, "--search", "batch_size=choice:32,-1", "--sweep-dir", tmp_path / "bad") == 2
    assert "--search batch_size: the value -1 is refused" in _herl_stderr(capsys)
    assert not (tmp_path / "bad").exists()


def test_a_trial_folder_that_is_a_link_or_holds_another_run_is_refused(seed_sweep: Path, tmp_path: Path) -> None:
    """A trial resumes only its own run, and only inside the sweep's runs/ folder."""
    from herl.distributed.sweep import read_spec, run_trial

    spec = read_spec(seed_sweep)
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "outside"
    import shutil

    shutil.copytree(seed_sweep / "runs" / "seed_0", outside)
    (runs / "seed_0").symlink_to(outside)
    with pytest.raises(CLIError, match="is a link"):
        run_trial({"seed": 0}, spec=spec, runs_dir=str(runs))
    (runs / "seed_0").unlink()
    shutil.copytree(seed_sweep / "runs" / "seed_1", runs / "seed_0")  # seed 1's run in seed 0's folder
    with pytest.raises(CLIError, match="holds a run whose seed differ from this trial's"):
        run_trial({"seed": 0}, spec=spec, runs_dir=str(runs))


def test_a_sweep_whose_trials_all_failed_exits_with_status_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    import herl.distributed.sweep as sweep

    failed = sweep.SweepResult(["run", "status"], [["runs/seed_0", "error"]], ["summary: ..."], evaluated=0)
    monkeypatch.setattr(sweep, "run_sweep", lambda *args, **kwargs: failed)
    assert herl("sweep", *BITS, "--sweep-dir", tmp_path / "s") == 1
    assert "no trial reached an evaluation" in capsys.readouterr().err


def test_a_best_toml_naming_a_module_env_asks_before_importing_it(seed_sweep: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # herl train --config FILE imported the module of the env FILE names, without asking as --resume does
    import dataclasses
    import shutil

    from herl.distributed.sweep import SweepState, read_spec, summarize

    imported = tmp_path / "ownmod_ran"
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "ownmod_herl_test.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    best = tmp_path / "best.toml"
    best.write_text((seed_sweep / "best.toml").read_text().replace('"herl/BitFlipping-v0"',
                                                                   '"ownmod_herl_test:BitFlipping-v0"'))
    assert herl("train", "--config", best, "--timesteps", "100", "--progress", "off") == 2
    err = _herl_stderr(capsys)
    assert f"{best} names the env 'ownmod_herl_test:BitFlipping-v0': making it imports the Python module" in err
    assert "--env ownmod_herl_test:BitFlipping-v0" in err and not imported.exists()
    # the sweep's own hint for such an env names it, which answers the question
    copy = tmp_path / "sweep"
    shutil.copytree(seed_sweep, copy)
    spec = dataclasses.replace(read_spec(copy), env="ownmod_herl_test:BitFlipping-v0")
    notes = summarize(spec, copy, SweepState.read(spec, copy)).notes
    assert f"best settings: herl train --config {copy / 'best.toml'} --env ownmod_herl_test:BitFlipping-v0" in notes


# ---------------------------------------------------------------------------------------------------------------------
# workers

CRASHING = "tests.distributed.crashing_env:CrashingBits-v0"  # bit flipping whose process dies mid-episode


def test_a_killed_worker_comes_back_and_its_episode_is_dropped(local_ray, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    """The actor's process dies (SIGKILL) in the middle of an episode, mid-run: Ray starts it again, the run
    finishes its steps, and the episode it was playing is dropped and counted, never stored. (One worker, so that the
    learner needs its next episode and must hear of the death: with more, it may finish on the others' episodes.)"""
    trigger = tmp_path / "crash"
    trigger.touch()
    run = tmp_path / "run"
    assert herl("train", "--env", CRASHING, *BITS[2:], "--timesteps", "400", "--workers", "1",
                "--set", f"env.trigger={trigger}", "--set", "env.after_episodes=20",
                "--set", f"env.spare_pid={os.getpid()}", "--progress", "off", "--run-dir", run) == 0
    assert not trigger.exists() and Path(f"{trigger}.taken").exists()  # it died, once
    err = capsys.readouterr().err
    assert "worker" in err and "actor died" in err and "dropped" in err
    summary = json.loads((run / "seed_0" / "summary.json").read_text())
    assert 400 <= summary["steps"] < 400 + 4  # less than one episode (4 steps) beyond
    assert any("1 episode(s) they were playing were dropped" in note for note in summary["notes"])
    rows = _rows(run / "seed_0" / "progress.csv")
    lost = [r["workers/lost_episodes"] for r in rows if r.get("workers/lost_episodes")]
    assert lost and float(lost[-1]) == 1


def test_a_worker_that_keeps_dying_stops_the_run_with_a_checkpoint_to_resume(local_ray, tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture) -> None:
    trigger = tmp_path / "crash"
    trigger.touch()
    run = tmp_path / "run"
    assert herl("train", "--env", CRASHING, *BITS[2:], "--timesteps", "300", "--workers", "1",
                "--set", f"env.trigger={trigger}", "--set", "env.crash=always", "--set", f"env.spare_pid={os.getpid()}",
                "--progress", "off", "--run-dir", run) == 2
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("herl train: error: "))
    assert "worker 0 of 1 (a Ray actor) died 4 times" in line and "3 times at most" in line
    assert f"herl train --resume {run / 'seed_0'}" in line
    assert latest_checkpoint(run / "seed_0") is not None
    trigger.unlink()  # the cause fixed: the run continues
    assert herl("train", "--resume", run, "--progress", "off") == 0
    assert json.loads((run / "seed_0" / "summary.json").read_text())["steps"] >= 300


def test_actor_deaths_are_counted_until_ray_gives_up_or_an_actor_does_not_come_back(
        capsys: pytest.CaptureFixture) -> None:
    from types import SimpleNamespace

    from herl.distributed.workers import ACTOR_RESTARTS, RESTART_WAIT, ActorDeaths, WorkerStats
    from herl.run.errors import WorkersLost

    stats = WorkerStats()
    deaths = ActorDeaths(SimpleNamespace(num_timesteps=120, seed=0), 2, stats)
    for _ in range(ACTOR_RESTARTS):
        deaths.died(1, RuntimeError("The actor died unexpectedly.\nAdvice on OOM killers"))
    assert (stats.actor_deaths, stats.lost_episodes) == (3, 3)
    assert len({deaths.seed(0), deaths.seed(1)}) == 2  # each restarted actor explores from a seed of its own
    assert "worker 1's actor died at env step 120 (RuntimeError: The actor died unexpectedly)" in capsys.readouterr().err
    with pytest.raises(WorkersLost, match=r"^worker 1 of 2 \(a Ray actor\) died 4 times, .* 3 times at most \(last: "
                       r"RuntimeError: The actor died unexpectedly\)$"):
        deaths.died(1, RuntimeError("The actor died unexpectedly.\nAdvice on OOM killers"))
    deaths.died(0, RuntimeError("gone"))
    deaths.check_restarts()  # not late yet
    deaths.restarting[0] -= RESTART_WAIT + 1
    with pytest.raises(WorkersLost, match="worker 0 of 2 .* has not started it again within 300 s"):
        deaths.check_restarts()


def test_more_workers_than_cpus_are_refused_before_ray_starts_or_a_run_folder_is_made(local_ray, tmp_path: Path,
                                                                                      capsys: pytest.CaptureFixture
                                                                                      ) -> None:
    run = tmp_path / "run"
    code = ("import sys; import ray; from herl.cli import main; "
            f"rc = main(['train', *{BITS!r}, '--workers', '3', '--cpus', '2', '--timesteps', '100', '--progress', "
            f"'off', '--run-dir', {str(run)!r}]); assert rc == 2, rc; assert not ray.is_initialized(); "
            "print('refused')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "refused" in out.stdout, out.stderr[-2000:]
    assert "3 workers need 3 CPUs for their actors, and Ray has 2" in out.stderr
    assert not run.exists()
    # on a Ray that is up (this module's, 2 CPUs): refused before the run folder too, so the corrected command runs
    assert herl("train", *BITS, "--workers", "3", "--timesteps", "100", "--progress", "off", "--run-dir", run) == 2
    assert "3 workers need 3 CPUs" in capsys.readouterr().err
    assert not run.exists()
    assert herl("train", *BITS, "--workers", "2", "--timesteps", "100", "--progress", "off", "--run-dir", run) == 0


def test_workers_reach_the_success_of_training_without_them(local_ray, tmp_path: Path) -> None:
    common = [*BITS, "--timesteps", "2000", "--set", "eval.freq=1000", "--set", "eval.episodes=50", "--progress", "off"]
    assert herl("train", *common, "--run-dir", tmp_path / "alone") == 0
    assert herl("train", *common, "--workers", "2", "--run-dir", tmp_path / "workers") == 0
    alone = json.loads((tmp_path / "alone" / "seed_0" / "summary.json").read_text())
    workers = json.loads((tmp_path / "workers" / "seed_0" / "summary.json").read_text())
    assert json.loads((tmp_path / "workers" / "seed_0" / "config.json").read_text())["workers"] == 2
    assert alone["final_success"] >= 0.9
    assert workers["final_success"] >= 0.9
    assert workers["steps"] >= 2000


# ---------------------------------------------------------------------------------------------------------------------
# evaluations on the actors


def test_evaluation_shares_split_the_episodes_evenly_with_a_seed_each() -> None:
    from herl.distributed.workers import evaluation_shares

    for n, actors in [(50, 2), (50, 3), (7, 4), (2, 5), (1, 1)]:
        shares = evaluation_shares(n, actors, seed=123)
        counts = [k for k, _ in shares]
        assert sum(counts) == n and max(counts) - min(counts) <= 1 and min(counts) >= 1
        assert len(shares) == min(n, actors)
        assert len({s for _, s in shares}) == len(shares)  # each actor its own env seed
        assert shares == evaluation_shares(n, actors, seed=123)
    assert evaluation_shares(10, 2, seed=1) != evaluation_shares(10, 2, seed=2)


def test_an_actor_evaluates_as_the_learner_would_with_the_same_weights_and_seed(local_ray) -> None:
    from herl import DQN
    from herl.distributed.workers import Collector, acting_spec, acting_weights
    from herl.run.envs import make_env
    from herl.training.evaluation import evaluate_policy

    env = make_env("herl/BitFlipping-v0", {"n_bits": 4})
    model = DQN("MultiInputPolicy", env, learning_starts=50, policy_kwargs=dict(net_arch=[32]), seed=3)
    model.learn(300)  # weights that differ from a fresh actor's
    actor = local_ray.remote(num_cpus=1)(Collector).remote("herl/BitFlipping-v0", {"n_bits": 4}, acting_spec(model), 0)
    remote = local_ray.get(actor.evaluate.remote(acting_weights(model), 1, 12, True, 77))
    local = evaluate_policy(model, make_env("herl/BitFlipping-v0", {"n_bits": 4}), n_eval_episodes=12,
                            deterministic=True, return_episode_rewards=True, return_success_rate=True, seed=77)
    assert remote == tuple([type(x)(v) for v in part] for part, x in zip(local, (1.0, 1, True)))
    local_ray.kill(actor)


def test_evaluations_during_training_run_on_the_actors(local_ray, tmp_path: Path, monkeypatch) -> None:
    from herl.run.train import RunCallback

    calls: list[tuple[int, int]] = []
    use = RunCallback.use_remote_evaluate

    def spy(self, evaluate):
        if evaluate is None:
            return use(self, None)

        def counted(n, deterministic, seed):
            result = evaluate(n, deterministic, seed)
            calls.append((self.model.num_timesteps, len(result[0])))
            return result
        return use(self, counted)

    monkeypatch.setattr(RunCallback, "use_remote_evaluate", spy)
    assert herl("train", *BITS, "--timesteps", "900", "--set", "eval.freq=300", "--set", "eval.episodes=7",
                "--workers", "2", "--set", "eval.on_workers=true", "--progress", "off", "--run-dir", tmp_path) == 0
    evaluated = [int(r["time/total_timesteps"]) for r in _rows(tmp_path / "seed_0" / "progress.csv")
                 if r.get("eval/success_rate")]
    # the evaluations between the first step and the last ran on the actors, 7 episodes each
    assert [n for _, n in calls] == [7] * len(calls) and len(calls) >= 2
    assert {step for step, _ in calls} <= set(evaluated)
    assert evaluated[0] == 0 and evaluated[-1] >= 900


def test_evaluations_on_workers_need_workers(capsys: pytest.CaptureFixture) -> None:
    assert herl("train", *BITS, "--timesteps", "100", "--set", "eval.on_workers=true", "--progress", "off") == 2
    assert "give workers >= 1" in capsys.readouterr().err


def test_a_sweep_of_a_batched_env_trains_batched_runs_and_its_best_settings_train(local_ray, tmp_path: Path) -> None:
    """Each trial of a batched env is a batched run folder (herl.run.batched), and best.toml trains with herl train."""
    sweep_dir = tmp_path / "batched"
    assert herl("sweep", "--env", "herl/BatchedPointReach-v0", "--n-envs", "8", "--timesteps", "800",
                "--set", "eval.freq=400", "--set", "eval.episodes=8", "--search", "learning_rate=loguniform:3e-4:3e-3",
                "--trials", "2", "--sweep-dir", sweep_dir) == 0
    rows = _rows(sweep_dir / "summary.csv")
    assert len(rows) == 2 and all(r["status"] == "done" for r in rows)
    for row in rows:
        run = sweep_dir / row["run"]
        config = json.loads((run / "config.json").read_text())
        assert config["env"] == "herl/BatchedPointReach-v0" and config["n_envs"] == 8 and config["batched"] is not None
        assert (run / "model.zip").exists() and (latest_checkpoint(run).path / "trainer.zip").exists()
    assert herl("train", "--config", sweep_dir / "best.toml", "--timesteps", "400", "--progress", "off",
                "--run-dir", tmp_path / "best") == 0


def test_workers_check_the_actors_env_against_the_model_before_ray_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from herl import DQN, HerReplayBuffer
    from herl.distributed import workers
    from herl.envs import BitFlippingEnv

    model = DQN("MultiInputPolicy", BitFlippingEnv(n_bits=4), replay_buffer_class=HerReplayBuffer, learning_starts=10)
    monkeypatch.setattr(workers, "ray_session", lambda *a, **k: pytest.fail("Ray was started"))
    with pytest.raises(CLIError, match=r"the actors' env, herl/BitFlipping-v0 made with env_kwargs=\{\}, has other "
                                       r"spaces than the model .* give learn the env_id and env_kwargs"):
        workers.learn(model, 100, env_id="herl/BitFlipping-v0", workers=1)
