"""Seed and hyperparameter sweeps on Ray Tune: ``herl sweep``.

A sweep runs one settings over seeds (a grid), or searches settings with Optuna's sampler (Tune's ``OptunaSearch``)
and stops bad trials early on their evaluation curve (Tune's ASHA scheduler). Each trial trains an ordinary herl run
folder (:func:`herl.run.train.start_run`), reporting each evaluation to Tune, so it can be resumed with
``herl train --resume`` and plotted with ``herl plot``.

The sweep folder::

    SWEEP_DIR/
      sweep.json     what the sweep runs: env, preset, algorithm, settings, seeds or search space, metric
      trials.json    herl's record of the trials: run folder, settings, seed, status, the step each resumed from
      runs/          one run folder per trial: seed_<S>/ (seeds) or trial_<N>/ (search)
      tune/          Ray Tune's working files, a folder per session; written for Tune, never read by herl
      summary.csv    one row per trial, sorted by the metric (also printed)
      best.toml      the best trial's settings as a preset: herl train --config SWEEP_DIR/best.toml

Fault tolerance is herl's resume under Tune's retries: a trial whose process dies is started again by Tune
(``FailureConfig(max_failures)``), finds its run folder and continues it from its last checkpoint. On a cluster of
several machines, the sweep folder must be on a filesystem every node sees.

``herl sweep --resume`` reads JSON only (sweep.json, trials.json, the run folders' config.json and progress.csv)
and the run folders' checkpoints (herl's zips of JSON and safetensors): it never calls Tune's ``Tuner.restore``,
which unpickles the files in ``tune/`` (a crafted pickle runs code). It starts a new Tuner whose trials are the
unfinished ones (:mod:`herl.distributed.tuner`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herl.distributed.cluster import ray_session
from herl.io.atomic import atomic_file
from herl.run.checkpoint import atomic_write_text, latest_checkpoint
from herl.run.config import build_config, check_key, parse_value
from herl.run.errors import CLIError
from herl.run.presets import format_preset

SPEC_FILE = "sweep.json"
SPEC_VERSION = 1
STATE_FILE = "trials.json"
STATE_VERSION = 1
RUN_KEY = "_herl_run"
"""The key of a search trial's Tune config that names its run folder (herl's name, kept across sessions)."""
STATUSES = ("pending", "running", "done", "stopped early", "error")
FINISHED = ("done", "stopped early")
"""Trials a resumed sweep keeps; the others (pending, running, error) it runs again, from their checkpoints."""
REPORTED = ("eval/success_rate", "eval/mean_reward", "eval/mean_ep_length")
"""What a trial reports to Tune at each evaluation (the metrics a sweep can rank by)."""
DISTRIBUTIONS = {
    "uniform": "uniform:LOW:HIGH",
    "loguniform": "loguniform:LOW:HIGH",
    "int": "int:LOW:HIGH (both included)",
    "logint": "logint:LOW:HIGH (both included)",
    "choice": "choice:A,B,...",
}


@dataclass(frozen=True)
class SearchParam:
    """One searched setting: ``key=distribution:arguments`` (``learning_rate=loguniform:1e-4:3e-3``)."""

    key: str
    distribution: str
    args: tuple[Any, ...]

    def tune_domain(self, tune: Any) -> Any:
        low, *rest = self.args
        if self.distribution == "choice":
            return tune.choice(list(self.args))
        high = rest[0]
        return {"uniform": lambda: tune.uniform(low, high), "loguniform": lambda: tune.loguniform(low, high),
                "int": lambda: tune.randint(low, high + 1), "logint": lambda: tune.lograndint(low, high + 1)}[
            self.distribution]()

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this distribution draws (to check a value read back from trials.json)."""
        if self.distribution == "choice":
            return any(type(value) is type(a) and value == a for a in self.args)
        want = int if self.distribution in ("int", "logint") else (int, float)
        return isinstance(value, want) and not isinstance(value, bool) and self.args[0] <= value <= self.args[1]

    def text(self) -> str:
        sep = "," if self.distribution == "choice" else ":"
        return f"{self.key}={self.distribution}:{sep.join(json.dumps(a) for a in self.args)}"


def parse_search(text: str, algo: str) -> SearchParam:
    """``--search KEY=DIST:ARGS``; an unknown key or distribution names the valid ones."""
    key, sep, spec = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise CLIError(f"--search takes KEY=DIST:ARGS (e.g. learning_rate=loguniform:1e-4:3e-3), got {text!r}")
    check_key(key, algo, "--search")
    if key in ("seed", "workers"):
        raise CLIError(f"--search cannot search {key}")
    distribution, _, rest = spec.partition(":")
    if distribution not in DISTRIBUTIONS:
        raise CLIError(f"unknown distribution {distribution!r} in --search {text}; distributions: "
                       + ", ".join(DISTRIBUTIONS.values()))
    usage = f"--search {key}={DISTRIBUTIONS[distribution]}, got {text!r}"
    if distribution == "choice":
        values = tuple(parse_value(v.strip()) for v in _split_top_level(rest) if v.strip())
        if not values:
            raise CLIError(usage)
        return SearchParam(key, distribution, values)
    bounds = rest.split(":")
    numbers = [parse_value(b.strip()) for b in bounds]
    want = int if distribution in ("int", "logint") else (int, float)
    if len(numbers) != 2 or not all(isinstance(n, want) and not isinstance(n, bool) for n in numbers):
        raise CLIError(usage)
    low, high = numbers
    if not all(math.isfinite(n) for n in numbers):
        raise CLIError(f"{usage}: LOW and HIGH must be finite numbers")
    if not low < high or (distribution.startswith("log") and low <= 0):
        raise CLIError(f"{usage}: LOW must be below HIGH" + (" and above 0" if distribution.startswith("log") else ""))
    return SearchParam(key, distribution, (low, high))


def _split_top_level(text: str) -> list[str]:
    """``A,B,...`` split at the commas outside brackets and quotes (``[64,64],[256,256]`` is two values)."""
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return [*parts, current]


@dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep runs; written as ``sweep.json``, read back by ``herl sweep --resume``."""

    env: str
    algo: str
    preset: str | None
    goal_env: bool
    layers: list[tuple[str, dict[str, Any]]]
    """The settings of every trial, as :func:`herl.run.config.build_config` layers (preset, flags, --set)."""
    seeds: list[int]
    """Seeds of a seed sweep (a grid); one seed for a search."""
    search: list[SearchParam]
    trials: int
    """Settings sampled by a search (1 for a seed sweep: each seed once)."""
    metric: str
    mode: str
    scheduler: str
    max_failures: int

    @classmethod
    def create(cls, settings: dict[str, Any], *, seeds: int | None, search: list[SearchParam], trials: int, seed: int,
               metric: str, mode: str, scheduler: str, max_failures: int) -> SweepSpec:
        if metric not in REPORTED:
            raise CLIError(f"--metric must be one a trial reports at each evaluation: {', '.join(REPORTED)}; got "
                           f"{metric!r}")
        spec = cls(env=settings["env"], algo=settings["algo"], preset=settings["preset"], goal_env=settings["goal_env"],
                   layers=[(source, dict(layer)) for source, layer in settings["layers"]],
                   seeds=list(range(seeds)) if seeds else [seed], search=list(search),
                   trials=trials if search else 1, metric=metric, mode=mode, scheduler=scheduler,
                   max_failures=max_failures)
        config = spec.trial_config({p.key: p.args[0] for p in search}, spec.seeds[0])  # settings checked now
        for param in search:  # every value a trial may get (each choice; a range's bounds), not only the first
            for value in param.args[1:]:
                try:
                    spec.trial_config({**{p.key: p.args[0] for p in search}, param.key: value}, spec.seeds[0])
                except (CLIError, ValueError) as err:
                    raise CLIError(f"--search {param.key}: the value {value!r} is refused: {err}") from None
        if config.workers:
            raise CLIError("a sweep's trials collect in their own process: workers must be 0 in a sweep")
        if config.eval.freq == 0:
            raise CLIError(f"a sweep ranks trials by {metric} at their evaluations: set eval.freq above 0")
        return spec

    def trial_config(self, params: dict[str, Any], seed: int) -> Any:
        layers = [*self.layers, ("--search", params)] if params else self.layers
        return build_config(algo=self.algo, env=self.env, seed=seed, layers=layers, goal_env=self.goal_env,
                            preset=self.preset)

    def default_dir(self) -> Path:
        return Path("sweeps") / f"{self.env.replace('/', '_')}_{self.algo}_{time.strftime('%Y%m%d-%H%M%S')}"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["search"] = [p.text() for p in self.search]
        return {"version": SPEC_VERSION, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepSpec:
        data = {k: v for k, v in data.items() if k != "version"}
        data["layers"] = [(source, dict(layer)) for source, layer in data["layers"]]
        data["search"] = [parse_search(text, data["algo"]) for text in data["search"]]
        return cls(**data)


@dataclass(frozen=True)
class SweepResult:
    headers: list[str]
    rows: list[list[Any]]
    """One per trial, best first."""
    notes: list[str]
    evaluated: int = 0
    """Trials that reached an evaluation; none (every trial failed) makes ``herl sweep`` exit with status 1."""


def run_trial(params: dict[str, Any], *, spec: SweepSpec, runs_dir: str) -> None:
    """A Tune trial: train (or, when its folder holds a run already, resume) one herl run, reporting evaluations."""
    from ray import tune

    params = dict(params)
    name = trial_name(params, spec)
    params.pop(RUN_KEY, None)
    seed = params.pop("seed", spec.seeds[0])
    run_dir = Path(runs_dir) / name
    from herl.batched.registry import is_batched_env
    from herl.run.train import CONFIG_FILE, ReportEachEval

    if is_batched_env(spec.env):  # a batched env's runs have their own runner (herl.run.batched), same interface
        from herl.run.batched import resume_run, start_run
    else:
        from herl.run.train import resume_run, start_run

    if run_dir.is_symlink() or not run_dir.resolve().is_relative_to(Path(runs_dir).resolve()):
        raise CLIError(f"{run_dir} is a link: a trial's run folder lies in {runs_dir}, so that nothing outside the "
                       "sweep is written")
    if (run_dir / CONFIG_FILE).exists():  # Tune retries a trial whose process died: herl resumes it
        from herl.run.train import read_config

        ran, planned = read_config(run_dir), spec.trial_config(params, seed)
        differ = [name for name in ("env", "algo", "seed") if getattr(ran, name) != getattr(planned, name)]
        differ += [key for key in params if _setting(ran, key) != _setting(planned, key)]
        if differ:
            raise CLIError(f"{run_dir} holds a run whose {', '.join(differ)} differ from this trial's: it is not this "
                           "sweep's run; move it away to train the trial from the start")
        last = latest_checkpoint(run_dir)
        resumed_from = last.step if last else 0
        print(f"herl sweep: {run_dir} resumes from step {resumed_from:,}", flush=True)

        reported = []

        def report(metrics: dict[str, float]) -> None:
            reported.append(metrics)
            tune.report({**metrics, "resumed_from_step": resumed_from})

        resume_run(run_dir, progress="off", on_eval=ReportEachEval(report))
        ended = {} if reported else _last_evaluation(run_dir)
        if ended:  # it had finished (the sweep was stopped before it heard): report how it ended
            tune.report({**ended, "resumed_from_step": resumed_from})
    else:
        start_run(spec.trial_config(params, seed), run_dir, progress="off",
                  on_eval=ReportEachEval(lambda metrics: tune.report({**metrics, "resumed_from_step": 0})))


def _setting(config: Any, key: str) -> Any:
    """The value of a ``--set`` key (``learning_rate``, ``env.n_bits``, ``policy.net_arch``) in a run's config."""
    section, _, name = key.partition(".")
    if not name:
        return config.hyperparameters.get(key, getattr(config, key, None))
    if section == "env":
        return config.env_kwargs.get(name)
    return getattr(getattr(config, section, None), name, None)


def _last_evaluation(run_dir: Path) -> dict[str, float]:
    """The last evaluation in a run folder's progress.csv, as its trial reported it."""
    from herl.run.plot import read_progress

    for row in reversed(read_progress(run_dir / "progress.csv")):
        try:
            metrics = {key: float(row[key]) for key in ("time/total_timesteps", *REPORTED) if row.get(key)}
        except ValueError:
            continue
        if "eval/mean_reward" in metrics:
            return metrics
    return {}


def trial_name(config: dict[str, Any], spec: SweepSpec) -> str:
    """The run folder (under ``runs/``) of the trial with this Tune config."""
    return str(config[RUN_KEY]) if RUN_KEY in config else f"seed_{config.get('seed', spec.seeds[0])}"


@dataclass
class TrialRecord:
    """One trial in ``trials.json``."""

    run: str
    """Its run folder's name under ``runs/``: ``seed_<S>`` or ``trial_<N>``."""
    seed: int
    params: dict[str, Any]
    """The searched settings (empty for a seed sweep)."""
    status: str = "pending"
    """pending (not started), running, done, stopped early (by ASHA), error (after its --max-failures retries)."""
    resumed_from: int = 0
    """The checkpoint step its run folder last resumed from (0: trained from the start)."""


@dataclass
class SweepState:
    """``trials.json``: herl's own record of a sweep's trials, from which ``herl sweep --resume`` rebuilds what
    Tune's pickled experiment state would hold. Written by the driver (:class:`herl.distributed.tuner.Recorder`)."""

    path: Path
    trials: list[TrialRecord]

    @classmethod
    def start(cls, spec: SweepSpec, sweep_dir: Path) -> SweepState:
        """A new sweep's record: the seeds of a seed sweep, all pending; no trial yet for a search."""
        trials = [] if spec.search else [TrialRecord(run=f"seed_{seed}", seed=seed, params={}) for seed in spec.seeds]
        return cls(Path(sweep_dir) / STATE_FILE, trials)

    @classmethod
    def read(cls, spec: SweepSpec, sweep_dir: Path) -> SweepState:
        """The record in ``sweep_dir``, checked against ``spec`` (JSON only: nothing in it is executed)."""
        sweep_dir = Path(sweep_dir)
        path = sweep_dir / STATE_FILE
        if not path.exists():
            return cls._without_record(spec, sweep_dir)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version') if isinstance(data, dict) else None!r}, this herl "
                                 f"reads {STATE_VERSION}")
            trials = [_record_from_json(item, spec) for item in data["trials"]]
            names = [t.run for t in trials]
            if len(set(names)) != len(names):
                raise ValueError("a run folder is named twice")
            for trial in trials:
                if trial.status not in FINISHED:
                    spec.trial_config(trial.params, trial.seed)  # settings a trial will train with: checked now
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, UnicodeDecodeError, CLIError) as err:
            raise CLIError(f"{path} is damaged ({type(err).__name__}: {err}); it is the sweep's record of its trials, "
                           "written by herl sweep: restore it, or start the sweep again in another --sweep-dir"
                           ) from None
        return cls(path, trials)

    @classmethod
    def _without_record(cls, spec: SweepSpec, sweep_dir: Path) -> SweepState:
        """A sweep without trials.json: stopped before it wrote one, or begun by an older herl, which kept the trials
        in Ray Tune's pickled files only. A seed sweep's trials are known from its spec and run folders; a search's
        settings are not, and herl does not read Tune's pickles."""
        state = cls.start(spec, sweep_dir)
        timesteps = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0]).timesteps
        for trial in state.trials:
            if run_finished(sweep_dir / "runs" / trial.run, timesteps):
                trial.status = "done"
        searched = sorted(p.name for p in (sweep_dir / "runs").glob("trial_*")) if spec.search else []
        if searched:
            raise CLIError(f"{sweep_dir} has no {STATE_FILE}, herl's record of a search's trials (a sweep begun by an "
                           "older herl kept them in Ray Tune's pickle files, which herl does not read: loading one can "
                           f"run code): continue its runs one by one with `herl train --resume {sweep_dir / 'runs'}`, "
                           "or start the search again in another --sweep-dir")
        return state

    def save(self) -> None:
        data = {"version": STATE_VERSION, "trials": [dataclasses.asdict(t) for t in self.trials]}
        atomic_write_text(self.path, json.dumps(data, indent=1))

    def find(self, run: str) -> TrialRecord | None:
        return next((t for t in self.trials if t.run == run), None)

    def unfinished(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.status not in FINISHED]

    def finished(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.status in FINISHED]

    def next_index(self, runs_dir: Path) -> int:
        """The number of the next search trial's folder: after every ``trial_<N>`` recorded or on disk."""
        names = [t.run for t in self.trials] + [p.name for p in Path(runs_dir).glob("trial_*")]
        numbers = [int(n[6:]) for n in names if _TRIAL_NAME.fullmatch(n)]
        return max(numbers, default=-1) + 1


_TRIAL_NAME = re.compile(r"trial_\d{1,9}")
_SEED_NAME = re.compile(r"seed_\d{1,9}")


def _record_from_json(item: Any, spec: SweepSpec) -> TrialRecord:
    fields = {f.name for f in dataclasses.fields(TrialRecord)}
    if not isinstance(item, dict) or set(item) != fields:
        raise ValueError(f"a trial must have the fields {sorted(fields)}, got {item!r:.200}")
    record = TrialRecord(**item)
    if not isinstance(record.seed, int) or isinstance(record.seed, bool) or record.seed not in spec.seeds:
        raise ValueError(f"trial {record.run!r:.50}: seed {record.seed!r:.50} is not one of the sweep's {spec.seeds}")
    if spec.search:  # the folder's name is checked, so that it stays in runs/
        good_name = isinstance(record.run, str) and bool(_TRIAL_NAME.fullmatch(record.run))
    else:
        good_name = record.run == f"seed_{record.seed}" and bool(_SEED_NAME.fullmatch(record.run))
    if not good_name:
        raise ValueError(f"run {record.run!r:.50} is not a trial folder name (trial_<N> or seed_<S>)")
    keys = {p.key for p in spec.search}
    if not isinstance(record.params, dict) or set(record.params) != keys:
        raise ValueError(f"trial {record.run}: its settings must be {sorted(keys)}, got {record.params!r:.200}")
    for param in spec.search:
        if not param.contains(record.params[param.key]):
            raise ValueError(f"trial {record.run}: {param.key}={record.params[param.key]!r:.50} is outside "
                             f"{param.text()}")
    if record.status not in STATUSES:
        raise ValueError(f"trial {record.run}: status {record.status!r:.50} is not one of {list(STATUSES)}")
    if not isinstance(record.resumed_from, int) or isinstance(record.resumed_from, bool) or record.resumed_from < 0:
        raise ValueError(f"trial {record.run}: resumed_from must be a whole number >= 0")
    return record


def run_finished(run_dir: Path, timesteps: int) -> bool:
    """Whether the run folder finished its ``timesteps`` (its summary.json says so)."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
        return isinstance(summary, dict) and int(summary.get("steps", 0)) >= timesteps
    except (OSError, ValueError, TypeError):
        return False


def eval_curve(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    """``(step, value)`` of each evaluation in a run folder's progress.csv (what its trial reported to Tune)."""
    from herl.run.plot import read_progress

    curve = []
    try:
        rows = read_progress(Path(run_dir) / "progress.csv")
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    for row in rows:
        try:
            step, value = int(float(row.get("time/total_timesteps") or "")), float(row.get(metric) or "")
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            curve.append((step, value))
    return curve


def run_sweep(spec: SweepSpec, sweep_dir: Path, *, address: str | None = None, cpus: int | None = None) -> SweepResult:
    """Run ``spec`` in ``sweep_dir`` (created; it must not hold a sweep already) on Ray, and summarize it."""
    from herl.distributed import tuner

    sweep_dir = Path(sweep_dir).resolve()
    existing = sweep_dir / SPEC_FILE
    if existing.exists():
        other = read_spec(sweep_dir)
        what = "this sweep" if other == spec else f"a sweep of {other.env} ({_preset_name(other)})"
        raise CLIError(f"{sweep_dir} already holds {what}: continue it with `herl sweep --resume {sweep_dir}`, or "
                       "choose another --sweep-dir")
    runs = sweep_dir / "runs"
    if runs.is_symlink() or runs.exists() and (not runs.is_dir() or any(runs.iterdir())):
        raise CLIError(f"{runs} holds runs already, which a new sweep would take for its trials: choose another "
                       "--sweep-dir, or move them away")
    with ray_session(address, cpus, what="herl sweep"):  # first: a cluster not reached leaves no sweep folder behind
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(existing, json.dumps(spec.to_json(), indent=1))
        state = SweepState.start(spec, sweep_dir)
        state.save()
        tuner.fit(spec, sweep_dir, state)
    return summarize(spec, sweep_dir, state)


def resume_sweep(sweep_dir: Path, *, env: str | None = None, preset: str | None = None, address: str | None = None,
                 cpus: int | None = None) -> SweepResult:
    """Continue the sweep in ``sweep_dir``: finished trials are kept, the others resume from their checkpoints, and a
    search draws the samples it has not drawn yet. Reads herl's JSON record (never Tune's pickled state)."""
    sweep_dir = Path(sweep_dir).resolve()
    spec = read_spec(sweep_dir)
    if env is not None and env != spec.env or preset is not None and preset != spec.preset:
        asked = ", ".join(f"{k} {v}" for k, v in (("env", env), ("preset", preset)) if v is not None)
        raise CLIError(f"{sweep_dir} is a sweep of {spec.env} ({_preset_name(spec)}), not of {asked}: resume it "
                       "without --env/--preset, or start a new sweep in another --sweep-dir")
    state = SweepState.read(spec, sweep_dir)
    from herl.run.train import CONFIG_FILE, read_config

    for trial in state.unfinished():  # a run folder resumes with its own config.json: it must be this sweep's
        run_dir = sweep_dir / "runs" / trial.run
        if (run_dir / CONFIG_FILE).exists() and read_config(run_dir).env != spec.env:
            raise CLIError(f"{run_dir} trains the env {read_config(run_dir).env!r}, not the sweep's {spec.env!r}: it "
                           "is not this sweep's run folder; move it away to train that trial again from the start")
    if state.unfinished() or spec.search and len(state.trials) < spec.trials:
        from herl.distributed import tuner

        state.save()
        with ray_session(address, cpus, what="herl sweep"):
            tuner.fit(spec, sweep_dir, state)
    return summarize(spec, sweep_dir, state)


def read_spec(sweep_dir: Path) -> SweepSpec:
    path = Path(sweep_dir) / SPEC_FILE
    if not path.exists():
        raise CLIError(f"{sweep_dir} is not a sweep folder (it has no {SPEC_FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != SPEC_VERSION:
            raise ValueError(f"version {data.get('version')!r}, this herl reads {SPEC_VERSION}")
        return SweepSpec.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise CLIError(f"{path} is damaged ({type(err).__name__}: {err}); it is the sweep's settings") from None


def _preset_name(spec: SweepSpec) -> str:
    return f"preset {spec.preset}" if spec.preset else "no preset"


def summarize(spec: SweepSpec, sweep_dir: Path, state: SweepState) -> SweepResult:
    """``summary.csv`` and ``best.toml`` from herl's record of the trials and their run folders' evaluations (each
    trial's progress.csv holds what it reported to Tune); the rows, best first."""
    keys = [p.key for p in spec.search]
    sign = 1 if spec.mode == "max" else -1
    trials = []
    for record in state.trials:
        curve = eval_curve(sweep_dir / "runs" / record.run, spec.metric)
        values = [value for _, value in curve]
        status = record.status if record.status in (*FINISHED, "error") else "unfinished"
        trials.append({"run": f"runs/{record.run}", "seed": record.seed, "params": record.params,
                       "final": values[-1] if values else None, "best": (max if sign > 0 else min)(values) if values
                       else None, "steps": curve[-1][0] if curve else 0, "status": status,
                       "resumed": record.resumed_from})
    trials.sort(key=lambda t: (t["final"] is None, -sign * (t["final"] or 0.0), -sign * (t["best"] or 0.0)))
    headers = ["run", "seed", *keys, f"final {spec.metric}", f"best {spec.metric}", "steps", "status",
               "resumed from step"]
    rows = [[t["run"], t["seed"], *(_short(t["params"].get(k)) for k in keys), _short(t["final"]), _short(t["best"]),
             f"{t['steps']:,}", t["status"], f"{t['resumed']:,}" if t["resumed"] else "-"] for t in trials]
    with atomic_file(sweep_dir / "summary.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(headers)
        writer.writerows([[t["run"], t["seed"], *(t["params"].get(k) for k in keys), t["final"], t["best"], t["steps"],
                           t["status"], t["resumed"] or ""] for t in trials])
    notes = [f"summary: {sweep_dir / 'summary.csv'}"]
    finished = sum(t["final"] is not None for t in trials)
    if trials and trials[0]["final"] is not None:
        best = trials[0]
        settings: dict[str, Any] = {}
        for _, layer in spec.layers:
            settings.update(layer)
        settings.update(best["params"])
        described = ", ".join(f"{k}={_short(v)}" for k, v in best["params"].items()) or f"seed {best['seed']}"
        text = format_preset(description=f"best of sweep {sweep_dir.name}: {described}, final {spec.metric} "
                             f"{_short(best['final'])}", envs=[spec.env], algo=spec.algo, settings=settings)
        atomic_write_text(sweep_dir / "best.toml", text)
        own_env = f" --env {shlex.quote(spec.env)}" if ":" in spec.env else ""  # --env confirms importing its module
        notes.append(f"best settings: herl train --config {shlex.quote(str(sweep_dir / 'best.toml'))}{own_env}")
    if keys:  # a search: each trial its own curve (a folder of runs would be drawn as seeds of one setting)
        shown = [t for t in trials if t["final"] is not None][:4]
        if shown:
            folders = " ".join(shlex.quote(str(sweep_dir / t["run"])) for t in shown)
            labels = " ".join(shlex.quote(", ".join(f"{k}={_short(t['params'].get(k))}" for k in keys)) for t in shown)
            notes.append(f"curves of the best {len(shown)}: herl plot {folders} --label {labels}")
    else:
        notes.append(f"curves: herl plot {shlex.quote(str(sweep_dir / 'runs'))}")
    if any(t["status"] == "unfinished" for t in trials):
        notes.append(f"unfinished trials: continue them with herl sweep --resume {sweep_dir}")
    return SweepResult(headers, rows, notes, finished)


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:.3g}" if abs(value) < 1e-2 or abs(value) >= 1e4 else f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)
