"""What a run folder holds and how it is read: its settings (``config.json``), its summary, its progress, and the
folders of several seeds. Below :mod:`herl.run.train`, :mod:`herl.run.evaluate`, :mod:`herl.run.plot` and
:mod:`herl.run.demos`, which all read run folders (none of them imports another to do so).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from herl.run.config import ALGOS, TrainConfig, algorithm_class, validate_config
from herl.run.errors import CLIError

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
PLAN_FILE = "seeds.json"
"""In a folder of seeds: each seed's settings as the command gave them, written before the first run starts, so that
``herl train --resume`` starts the seeds a stopped command never reached."""


def read_config(run_dir: Path) -> TrainConfig:
    """The settings of the run in ``run_dir``, checked as the command line checks them (a CLIError if damaged)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        _check_exists(Path(run_dir))
        raise CLIError(f"{run_dir} is not a run folder (it has no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"it holds a {type(data).__name__}, not a mapping of settings")
        if isinstance(data.get("hyperparameters"), dict) and data.get("algo") in ALGOS:
            # every hyperparameter is written; one missing is a field added or re-defaulted since
            config_class = algorithm_class(data["algo"]).config_class
            data["hyperparameters"] = config_class.with_former_defaults(data["hyperparameters"])
        config = TrainConfig.from_json(data, source=str(path))
        validate_config(config)
        return config
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError, CLIError) as err:
        raise CLIError(f"{path} is damaged ({type(err).__name__}: {err}); it is the run's settings, written by "
                       "`herl train`: restore it, or start the run again in another folder") from None


def find_seed_runs(path: Path, *, planned: bool = False) -> list[Path]:
    """The run folders (those with a config.json) at ``path`` or one level below it; none is an error unless
    ``planned`` (the folder's plan names seeds still to start)."""
    path = Path(path)
    if (path / CONFIG_FILE).exists():
        return [path]
    _check_exists(path)
    runs = sorted((p for p in path.iterdir() if (p / CONFIG_FILE).exists()), key=seed_order) if path.is_dir() else []
    if not runs and not planned:
        raise CLIError(f"{path} is not a run folder: it holds no {CONFIG_FILE}, nor folders that do")
    return runs


def write_plan(folder: Path, runs: dict[str, TrainConfig]) -> None:
    """Record the seeds' runs a command is about to train in ``folder`` (``{"seed_0": config, ...}``)."""
    from herl.io.atomic import atomic_write

    atomic_write(Path(folder) / PLAN_FILE, json.dumps({name: c.to_json() for name, c in runs.items()}, indent=1))


def planned_runs(folder: Path) -> dict[Path, TrainConfig]:
    """The runs ``folder``'s plan names that never started (their folder holds no config.json), with their settings."""
    path = Path(folder) / PLAN_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"it holds a {type(data).__name__}, not a mapping of runs")
        pending = {}
        for name, settings in data.items():
            if not (isinstance(name, str) and name.startswith("seed_") and name[len("seed_"):].isdigit()):
                raise ValueError(f"it names {name!r}, not a seed's folder")
            if not (Path(folder) / name / CONFIG_FILE).exists():
                config = TrainConfig.from_json(settings, source=str(path))
                validate_config(config)
                pending[Path(folder) / name] = config
        return pending
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError, CLIError) as err:
        raise CLIError(f"{path} is damaged ({type(err).__name__}: {err}); it lists the seeds `herl train` was asked "
                       "for: restore it, or delete it to resume only the seeds that started") from None


def run_folder_of(model_file: Path) -> Path | None:
    """The run folder a model file belongs to (``RUN/model.zip``, ``RUN/checkpoints/step_N/model.zip``), or None."""
    for folder in list(model_file.resolve().parents)[:3]:
        if (folder / CONFIG_FILE).is_file():
            return folder
    return None


def seed_order(path: Path) -> tuple[int, str]:
    """Seed folders in the order of their seeds (``seed_2`` before ``seed_10``), other names after them."""
    suffix = path.name.rpartition("_")[2]
    return (int(suffix) if suffix.isdigit() else 1 << 30, path.name)


def read_progress(path: Path) -> list[dict[str, str]]:
    """The rows of a run's ``progress.csv`` (none when it does not exist yet)."""
    if not path.exists():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as err:
        raise CLIError(f"{path} is not a progress file herl can read ({err}): it is damaged; herl writes it as "
                       "comma-separated UTF-8 text with one row per log") from None


def _check_exists(path: Path) -> None:
    """A ``CLIError`` for a path that is not there at all (a typo, or the wrong working folder), said as such."""
    if not path.exists():
        raise CLIError(f"{path} does not exist (looked for from {Path.cwd()}): give the folder `herl train` wrote "
                       "the run to (its --run-dir, or runs/ENV_ALGO_TIME by default)")

