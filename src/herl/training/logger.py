"""One small logger with namespaced keys (``rollout/success_rate``, ``train/critic_loss``, ``time/fps``).

Values recorded between two ``dump`` calls are written together to every output: a table on
stdout, a CSV file, TensorBoard. The interface is Stable-Baselines3's (``record``, ``dump``,
``configure``), so callbacks written for SB3 that call ``self.logger.record`` keep working.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np


class OutputFormat:
    def write(self, values: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class HumanOutputFormat(OutputFormat):
    """A table grouped by namespace, as SB3 prints it."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def write(self, values: dict[str, Any], step: int) -> None:
        stream = self.stream or sys.stdout
        rows: list[tuple[str, str]] = []
        last_ns = None
        for key in sorted(values):
            ns, _, name = key.rpartition("/")
            if ns != last_ns:
                rows.append((f"{ns}/", ""))
                last_ns = ns
            rows.append((f"    {name}", _format(values[key])))
        width_k = max(len(k) for k, _ in rows)
        width_v = max(len(v) for _, v in rows)
        line = "-" * (width_k + width_v + 7)
        stream.write(line + "\n")
        for k, v in rows:
            stream.write(f"| {k:<{width_k}} | {v:<{width_v}} |\n")
        stream.write(line + "\n")
        stream.flush()


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:<8.3g}"
    return str(value)


class CSVOutputFormat(OutputFormat):
    """``progress.csv``; a key that appears later adds a column (the file is rewritten once)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.file = open(self.path, "w", newline="")

    def write(self, values: dict[str, Any], step: int) -> None:
        new = [k for k in sorted(values) if k not in self.keys]
        self.rows.append(dict(values))
        if new:
            self.keys.extend(new)
            self.file.seek(0)
            self.file.truncate()
            writer = csv.DictWriter(self.file, fieldnames=self.keys)
            writer.writeheader()
            writer.writerows(self.rows)
        else:
            csv.DictWriter(self.file, fieldnames=self.keys).writerow(values)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoardOutputFormat(OutputFormat):
    def __init__(self, folder: str | os.PathLike) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # tensorboard is an optional extra
            raise ImportError("TensorBoard logging needs the tensorboard package: pip install herl[tensorboard]") from err
        self.writer = SummaryWriter(log_dir=str(folder))

    def write(self, values: dict[str, Any], step: int) -> None:
        for key, value in values.items():
            if isinstance(value, (int, float, np.number)):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Logger:
    """Collects values by key and writes them to its outputs at :meth:`dump`."""

    def __init__(self, folder: str | os.PathLike | None = None, outputs: list[OutputFormat] | None = None) -> None:
        self.dir = None if folder is None else str(folder)
        self.outputs = list(outputs or [])
        self.values: dict[str, Any] = {}
        self._means: dict[str, list[float]] = {}

    def record(self, key: str, value: Any, exclude: Any = None) -> None:
        self.values[key] = value

    def record_mean(self, key: str, value: float, exclude: Any = None) -> None:
        self._means.setdefault(key, []).append(float(value))

    def get_dir(self) -> str | None:
        return self.dir

    @property
    def name_to_value(self) -> dict[str, Any]:
        """The values recorded since the last dump, by key (SB3's name), averaged for :meth:`record_mean`'s keys: a
        copy (recording goes through :meth:`record`)."""
        return {**self.values, **{k: float(np.mean(v)) for k, v in self._means.items()}}

    def dump(self, step: int = 0) -> None:
        values = {k: (v.item() if hasattr(v, "item") else v) for k, v in self.name_to_value.items()}
        if values:
            for output in self.outputs:
                output.write(values, step)
        self.values.clear()
        self._means.clear()

    def close(self) -> None:
        for output in self.outputs:
            output.close()


def configure(folder: str | os.PathLike | None = None, format_strings: list[str] | None = None) -> Logger:
    """A logger writing to ``folder`` in the formats ``"stdout"``, ``"csv"``, ``"tensorboard"`` (SB3's ``configure``)."""
    format_strings = ["stdout"] if format_strings is None else format_strings
    outputs: list[OutputFormat] = []
    for fmt in format_strings:
        if fmt == "stdout":
            outputs.append(HumanOutputFormat())
        elif fmt == "csv":
            if folder is None:
                raise ValueError("CSV logging needs a folder: configure(folder, ['csv'])")
            outputs.append(CSVOutputFormat(Path(folder) / "progress.csv"))
        elif fmt == "tensorboard":
            if folder is None:
                raise ValueError("TensorBoard logging needs a folder: configure(folder, ['tensorboard'])")
            outputs.append(TensorBoardOutputFormat(folder))
        else:
            raise ValueError(f"unknown log format {fmt!r}: use 'stdout', 'csv' or 'tensorboard'")
    return Logger(folder, outputs)
