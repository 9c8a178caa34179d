"""The run folder's logs: ``progress.csv`` and TensorBoard events that a resumed run continues.

On resume, rows and events logged after the checkpoint (by the process that crashed) are dropped, since the resumed
run logs those steps again. Every row also gets ``time/wall_time``: seconds of training so far, over all the
processes that trained this run, for ``herl plot --x time``.
"""

from __future__ import annotations

import csv
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from herl.io.atomic import atomic_file
from herl.training.logger import Logger, OutputFormat, _plain

STEP_KEY = "time/total_timesteps"
WALL_KEY = "time/wall_time"


class ResumableCSV(OutputFormat):
    """``progress.csv`` kept in memory and on disk; starts from the rows up to ``keep_until`` of an existing file."""

    name = "csv"

    def __init__(self, path: str | os.PathLike, keep_until: int | None = None) -> None:
        self.path = Path(path)
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        if keep_until is not None and self.path.exists():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.keys = list(reader.fieldnames or [])
                # a row cut short by a kill has missing (None) or surplus (key None) fields: drop it
                self.rows = [row for row in reader
                             if None not in row and None not in row.values() and _step(row) <= keep_until]
        self._rewrite()
        self.file = open(self.path, "a", newline="")

    def _rewrite(self) -> None:
        with atomic_file(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.keys)
            writer.writeheader()
            writer.writerows(self.rows)

    def write(self, values: dict[str, Any], step: int) -> None:
        values = {k: v for k, v in values.items() if _plain(v)}
        self.rows.append(dict(values))
        new = [k for k in sorted(values) if k not in self.keys]
        if new:  # a new column: rewrite the file with it
            self.keys.extend(new)
            self.file.close()
            self._rewrite()
            self.file = open(self.path, "a", newline="")
        else:
            csv.DictWriter(self.file, fieldnames=self.keys).writerow(values)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get(STEP_KEY) or 0)
    except ValueError:
        return 0.0


class ResumableTensorBoard(OutputFormat):
    """TensorBoard events; ``purge_step`` hides the events a crashed process wrote after the checkpoint."""

    name = "tensorboard"

    def __init__(self, folder: str | os.PathLike, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)

    def write(self, values: dict[str, Any], step: int) -> None:
        for key, value in values.items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunLogger(Logger):
    """A logger that stamps every row with the step and the run's wall time (carried over a resume)."""

    def __init__(self, folder: Path, outputs: list[OutputFormat], wall_time_before: float = 0.0) -> None:
        super().__init__(folder, outputs)
        self.wall_time_before = wall_time_before
        self.started = time.perf_counter()

    def wall_time(self) -> float:
        return self.wall_time_before + time.perf_counter() - self.started

    def dump(self, step: int = 0) -> None:
        if self.values or self._means:
            self.values.setdefault(STEP_KEY, step)
            self.values[WALL_KEY] = round(self.wall_time(), 3)
        super().dump(step)


def open_run_logger(folder: Path, *, resume_step: int | None, wall_time_before: float = 0.0,
                    tensorboard: bool = True) -> RunLogger:
    """The logger of a run folder: progress.csv, and TensorBoard events when the package is installed."""
    outputs: list[OutputFormat] = [ResumableCSV(folder / "progress.csv", keep_until=resume_step)]
    if tensorboard:
        try:
            outputs.append(ResumableTensorBoard(folder, purge_step=None if resume_step is None else resume_step + 1))
        except ImportError:
            warnings.warn("TensorBoard events are not written: pip install 'herl[tensorboard]'", stacklevel=2)
    return RunLogger(folder, outputs, wall_time_before)
