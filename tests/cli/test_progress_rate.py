"""The rate in herl train's log lines: measured even where evaluations and checkpoints come more often than the
half-second window the rate is measured over (every line once read "0 fps" there), and never shown as 0 before any
step was timed."""

from __future__ import annotations

import re

import pytest

from herl.run import progress as progress_module
from herl.run.progress import Progress


def test_log_lines_show_the_rate_when_checkpoints_restart_its_window_often(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    bar = Progress(total=2000, mode="log")
    for step in range(1, 2001):  # 500 steps/s, and a checkpoint every 100 steps (0.2 s) restarts the window
        now[0] += 0.002
        bar.update(step)
        if step % 100 == 0:
            bar.restart_rate()
    bar.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) >= 10
    assert lines[0] == "1/2000 steps (0%)"  # no step timed yet: no rate, rather than "0 fps"
    rates = [int(m) for line in lines[1:] for m in re.findall(r", (\d+) fps", line)]
    assert len(rates) == len(lines) - 1 and all(490 <= rate <= 510 for rate in rates), lines
