"""When the NaN guard stops ``herl train``, the user reads one line (status 2) with the cause, the fix and the
checkpoint to continue from, not a traceback (status 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from herl.cli import main

DIVERGING = ["--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "400", "--progress", "off",
             "--set", "learning_rate=1e30", "--set", "learning_starts=100", "--set", "eval.freq=0",
             "--set", "policy.net_arch=[16,16]", "--set", "batch_size=16"]


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("herl train: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_diverged_run_stops_with_one_line_naming_cause_fix_and_checkpoint(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", *DIVERGING, "--set", "checkpoint.freq=50", "--run-dir", str(run)]) == 2
    line = _error_line(capsys)
    assert line.startswith("herl train: error: training stopped at env step 101: the policy's action of env 0 holds "
                           "NaN or infinity")
    assert "the policy diverged" in line and "Lower learning_rate" in line
    checkpoint = run / "seed_0" / "checkpoints" / "step_000000000100"
    assert f"The run's last checkpoint, {checkpoint} (step 100), was taken before this" in line
    assert f"`herl train --resume {run / 'seed_0'}` continues from it" in line and "start a new run with --set" in line
    assert checkpoint.is_dir()


def test_without_a_checkpoint_it_says_to_start_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", *DIVERGING, "--set", "checkpoint.freq=1000", "--run-dir", str(run)]) == 2
    line = _error_line(capsys)
    assert "the policy diverged" in line
    assert f"The run {run / 'seed_0'} has no checkpoint yet: once the cause is fixed, start it again" in line


def test_runs_trained_in_worker_processes_report_it_the_same_way(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *DIVERGING, "--seed", "0", "1", "--jobs", "2", "--run-dir", str(tmp_path / "runs")]) == 2
    line = _error_line(capsys)
    assert "training stopped at env step 101" in line and "the policy diverged" in line
