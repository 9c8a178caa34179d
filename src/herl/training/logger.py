"""One small logger with namespaced keys (``rollout/success_rate``, ``train/critic_loss``, ``time/fps``).

Values recorded between two ``dump`` calls are written together to every output: a table on
stdout, a CSV file, TensorBoard. The interface is Stable-Baselines3's (``record``, ``dump``,
``configure``), so callbacks written for SB3 that call ``self.logger.record`` keep working.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np


class OutputFormat:
    name = ""
    """The format's name in SB3's ``record(key, value, exclude=...)``: "stdout", "log", "csv", "json", "tensorboard"."""

    def write(self, values: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class HumanOutputFormat(OutputFormat):
    """A table grouped by namespace, as SB3 prints it: on stdout, or into a text file (SB3's "log": ``log.txt``)."""

    name = "stdout"

    def __init__(self, stream: TextIO | None = None, path: str | os.PathLike | None = None) -> None:
        self.stream = stream
        self.file = None
        if path is not None:
            self.name = "log"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = self.stream = open(path, "a", encoding="utf-8")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def write(self, values: dict[str, Any], step: int) -> None:
        values = {k: v for k, v in values.items() if _plain(v)}
        if not values:
            return
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


def _plain(value: Any) -> bool:
    """A value the text formats write: a number, a bool or a string (SB3's Figure, Image, Video and HParam objects
    are TensorBoard's alone)."""
    return isinstance(value, (int, float, str, bool, np.number, np.bool_))


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:<8.3g}"
    return str(value)


class CSVOutputFormat(OutputFormat):
    """``progress.csv``; a key that appears later adds a column (the file is rewritten once)."""

    name = "csv"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keys: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.file = open(self.path, "w", newline="")

    def write(self, values: dict[str, Any], step: int) -> None:
        values = {k: v for k, v in values.items() if _plain(v)}
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


class JSONOutputFormat(OutputFormat):
    """``progress.json``: one JSON object per dump, a line each (SB3's "json")."""

    name = "json"

    def __init__(self, path: str | os.PathLike) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "a", encoding="utf-8")

    def write(self, values: dict[str, Any], step: int) -> None:
        row = {k: (v.item() if hasattr(v, "item") else v) for k, v in values.items() if _plain(v)}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoardOutputFormat(OutputFormat):
    name = "tensorboard"

    def __init__(self, folder: str | os.PathLike) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # tensorboard is an optional extra
            raise ImportError("TensorBoard logging needs the tensorboard package: pip install herl[tensorboard]") from err
        self.writer = SummaryWriter(log_dir=str(folder))

    def write(self, values: dict[str, Any], step: int) -> None:
        for key, value in values.items():
            kind = type(value).__name__
            if isinstance(value, (int, float, np.number)):
                self.writer.add_scalar(key, value, step)
            elif isinstance(value, str):
                self.writer.add_text(key, value, step)
            elif kind == "Figure" and hasattr(value, "figure"):  # SB3's logger value types, by their fields
                self.writer.add_figure(key, value.figure, step, close=getattr(value, "close", True))
            elif kind == "Image" and hasattr(value, "image"):
                self.writer.add_image(key, value.image, step, dataformats=value.dataformats)
            elif kind == "Video" and hasattr(value, "frames"):
                self.writer.add_video(key, value.frames, step, value.fps)
            elif kind == "HParam" and hasattr(value, "hparam_dict"):
                self.writer.add_hparams(value.hparam_dict, value.metric_dict, run_name=".")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Logger:
    """Collects values by key and writes them to its outputs at :meth:`dump`."""

    DEBUG, INFO, WARN, ERROR, DISABLED = 10, 20, 30, 40, 50  # SB3's levels, for log()

    def __init__(self, folder: str | os.PathLike | None = None, outputs: list[OutputFormat] | None = None) -> None:
        self.dir = None if folder is None else str(folder)
        self.outputs = list(outputs or [])
        self.values: dict[str, Any] = {}
        self._means: dict[str, list[float]] = {}
        self._excluded: dict[str, tuple[str, ...]] = {}
        self.level = self.INFO

    @property
    def output_formats(self) -> list[OutputFormat]:
        """SB3's name for the outputs."""
        return self.outputs

    def record(self, key: str, value: Any, exclude: Any = None) -> None:
        """Keep ``value`` for ``key`` until the next :meth:`dump`; ``exclude`` names formats ("stdout", "log", "csv",
        "json", "tensorboard") that leave it out, as in SB3."""
        self.values[key] = value
        self._exclude(key, exclude)

    def record_mean(self, key: str, value: float, exclude: Any = None) -> None:
        self._means.setdefault(key, []).append(float(value))
        self._exclude(key, exclude)

    def _exclude(self, key: str, exclude: Any) -> None:
        if exclude is None:
            self._excluded.pop(key, None)
        else:
            self._excluded[key] = (exclude,) if isinstance(exclude, str) else tuple(exclude)

    def pending(self) -> dict[str, Any]:
        """The numbers recorded since the last :meth:`dump`, with their means and exclusions: what a checkpoint keeps,
        so that a run resumed from it logs the row a run never stopped would (:meth:`take_pending` puts them back)."""
        values = {k: (v.item() if hasattr(v, "item") and callable(v.item) and _plain(v) else v)  # as dump() has them
                  for k, v in self.values.items()}
        return {"values": {k: v for k, v in values.items() if type(v) in (int, float, bool, str)},
                "means": {k: list(v) for k, v in self._means.items()},
                "excluded": {k: list(v) for k, v in self._excluded.items()}}

    def take_pending(self, pending: Mapping[str, Any]) -> None:
        """Record what :meth:`pending` of another logger returned (before anything else is recorded)."""
        self.values.update(pending.get("values", {}))
        self._means.update({k: [float(x) for x in v] for k, v in pending.get("means", {}).items()})
        self._excluded.update({k: tuple(v) for k, v in pending.get("excluded", {}).items()})

    def log(self, *args: Any, level: int = INFO) -> None:
        """Print ``args`` on stdout when ``level`` reaches the logger's (SB3's ``logger.log``)."""
        if level >= self.level:
            print(*args, flush=True)

    def debug(self, *args: Any) -> None:
        self.log(*args, level=self.DEBUG)

    def info(self, *args: Any) -> None:
        self.log(*args, level=self.INFO)

    def warn(self, *args: Any) -> None:
        self.log(*args, level=self.WARN)

    def error(self, *args: Any) -> None:
        self.log(*args, level=self.ERROR)

    def set_level(self, level: int) -> None:
        self.level = level

    def get_dir(self) -> str | None:
        return self.dir

    @property
    def name_to_value(self) -> dict[str, Any]:
        """The values recorded since the last dump, by key (SB3's name), averaged for :meth:`record_mean`'s keys: a
        copy (recording goes through :meth:`record`)."""
        return {**self.values, **{k: float(np.mean(v)) for k, v in self._means.items()}}

    def dump(self, step: int = 0) -> None:
        values = {k: (v.item() if hasattr(v, "item") and callable(v.item) and _plain(v) else v)
                  for k, v in self.name_to_value.items()}
        if values:
            for output in self.outputs:
                shown = {k: v for k, v in values.items() if output.name not in self._excluded.get(k, ())}
                if shown:
                    output.write(shown, step)
        self.values.clear()
        self._means.clear()
        self._excluded.clear()

    def close(self) -> None:
        for output in self.outputs:
            output.close()


def configure(folder: str | os.PathLike | None = None, format_strings: list[str] | None = None) -> Logger:
    """A logger writing to ``folder`` in the formats ``"stdout"``, ``"log"`` (``log.txt``), ``"csv"``
    (``progress.csv``), ``"json"`` (``progress.json``) and ``"tensorboard"`` (SB3's ``configure``). Without
    ``format_strings``: SB3's stdout, log and csv with a folder (made if missing); stdout alone without one (SB3
    then makes a folder in the temporary directory)."""
    if format_strings is None:
        format_strings = ["stdout"] if folder is None else ["stdout", "log", "csv"]
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
    outputs: list[OutputFormat] = []
    for fmt in format_strings:
        if fmt == "stdout":
            outputs.append(HumanOutputFormat())
        elif fmt in ("log", "json"):
            if folder is None:
                raise ValueError(f"{fmt} logging needs a folder: configure(folder, [{fmt!r}])")
            outputs.append(HumanOutputFormat(path=Path(folder) / "log.txt") if fmt == "log"
                           else JSONOutputFormat(Path(folder) / "progress.json"))
        elif fmt == "csv":
            if folder is None:
                raise ValueError("CSV logging needs a folder: configure(folder, ['csv'])")
            outputs.append(CSVOutputFormat(Path(folder) / "progress.csv"))
        elif fmt == "tensorboard":
            if folder is None:
                raise ValueError("TensorBoard logging needs a folder: configure(folder, ['tensorboard'])")
            outputs.append(TensorBoardOutputFormat(folder))
        else:
            raise ValueError(f"unknown log format {fmt!r}: use 'stdout', 'log', 'csv', 'json' or 'tensorboard'")
    return Logger(folder, outputs)
