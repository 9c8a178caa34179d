"""Seed and hyperparameter sweeps on Ray Tune: ``herl sweep``.

A sweep runs one settings over seeds (a grid), or searches settings with Optuna's sampler (Tune's ``OptunaSearch``)
and stops bad trials early on their evaluation curve (Tune's ASHA scheduler). Each trial trains an ordinary herl run
folder (:func:`herl.run.train.start_run`), reporting each evaluation to Tune, so it can be resumed with
``herl train --resume`` and plotted with ``herl plot``.

The sweep folder::

    SWEEP_DIR/
      sweep.json     what the sweep runs: env, preset, algorithm, settings, seeds or search space, metric
      runs/          one run folder per trial: seed_<S>/ (seeds) or trial_<id>/ (search)
      tune/          Ray Tune's experiment state (what `herl sweep --resume` restores)
      summary.csv    one row per trial, sorted by the metric (also printed)
      best.toml      the best trial's settings as a preset: herl train --config SWEEP_DIR/best.toml

Fault tolerance is herl's resume under Tune's retries: a trial whose process dies is started again by Tune
(``FailureConfig(max_failures)``), finds its run folder and continues it from its last checkpoint. On a cluster of
several machines, the sweep folder must be on a filesystem every node sees.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herl.distributed.cluster import ray_session
from herl.run.checkpoint import atomic_write_text, latest_checkpoint
from herl.run.config import build_config, check_key, parse_value
from herl.run.errors import CLIError
from herl.run.presets import format_preset

SPEC_FILE = "sweep.json"
SPEC_VERSION = 1
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


def run_trial(params: dict[str, Any], *, spec: SweepSpec, runs_dir: str) -> None:
    """A Tune trial: train (or, when its folder holds a run already, resume) one herl run, reporting evaluations."""
    from ray import tune

    params = dict(params)
    seed = params.pop("seed", spec.seeds[0])
    name = f"seed_{seed}" if not spec.search else f"trial_{tune.get_context().get_trial_id()}"
    run_dir = Path(runs_dir) / name
    from herl.run.train import CONFIG_FILE, resume_run, start_run

    if (run_dir / CONFIG_FILE).exists():  # Tune retries a trial whose process died: herl resumes it
        last = latest_checkpoint(run_dir)
        resumed_from = last.step if last else 0
        print(f"herl sweep: {run_dir} resumes from step {resumed_from:,}", flush=True)

        def report(metrics: dict[str, float]) -> None:
            tune.report({**metrics, "resumed_from_step": resumed_from})

        resume_run(run_dir, progress="off", on_eval=report)
    else:
        start_run(spec.trial_config(params, seed), run_dir, progress="off",
                  on_eval=lambda metrics: tune.report({**metrics, "resumed_from_step": 0}))


def _trainable(spec: SweepSpec, sweep_dir: Path) -> Any:
    from ray import tune

    config = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0])
    function = tune.with_parameters(run_trial, spec=spec, runs_dir=str(sweep_dir / "runs"))
    return tune.with_resources(function, {"cpu": config.threads})


def _tuner(spec: SweepSpec, sweep_dir: Path) -> Any:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    timesteps = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0]).timesteps
    if spec.search:
        space: dict[str, Any] = {p.key: p.tune_domain(tune) for p in spec.search}
        searcher = OptunaSearch(seed=spec.seeds[0])
        scheduler = ASHAScheduler(time_attr="time/total_timesteps", max_t=timesteps, grace_period=max(timesteps // 4, 1),
                                  reduction_factor=3) if spec.scheduler == "asha" else None
        tune_config = tune.TuneConfig(metric=spec.metric, mode=spec.mode, search_alg=searcher, scheduler=scheduler,
                                      num_samples=spec.trials)
    else:
        space = {"seed": tune.grid_search(spec.seeds)}
        tune_config = tune.TuneConfig(metric=spec.metric, mode=spec.mode)
    run_config = tune.RunConfig(name="tune", storage_path=str(sweep_dir.resolve()), verbose=1,
                                failure_config=tune.FailureConfig(max_failures=spec.max_failures))
    return tune.Tuner(_trainable(spec, sweep_dir), param_space=space, tune_config=tune_config, run_config=run_config)


def run_sweep(spec: SweepSpec, sweep_dir: Path, *, address: str | None = None, cpus: int | None = None) -> SweepResult:
    """Run ``spec`` in ``sweep_dir`` (created; it must not hold a sweep already) on Ray, and summarize it."""
    sweep_dir = Path(sweep_dir).resolve()
    existing = sweep_dir / SPEC_FILE
    if existing.exists():
        other = read_spec(sweep_dir)
        what = "this sweep" if other == spec else f"a sweep of {other.env} ({_preset_name(other)})"
        raise CLIError(f"{sweep_dir} already holds {what}: continue it with `herl sweep --resume {sweep_dir}`, or "
                       "choose another --sweep-dir")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(existing, json.dumps(spec.to_json(), indent=1))
    with ray_session(address, cpus, what="herl sweep"):
        results = _tuner(spec, sweep_dir).fit()
    return summarize(spec, sweep_dir, results)


def resume_sweep(sweep_dir: Path, *, env: str | None = None, preset: str | None = None, address: str | None = None,
                 cpus: int | None = None) -> SweepResult:
    """Continue the sweep in ``sweep_dir``: finished trials are kept, the others resume from their checkpoints."""
    from ray import tune

    sweep_dir = Path(sweep_dir).resolve()
    spec = read_spec(sweep_dir)
    if env is not None and env != spec.env or preset is not None and preset != spec.preset:
        asked = ", ".join(f"{k} {v}" for k, v in (("env", env), ("preset", preset)) if v is not None)
        raise CLIError(f"{sweep_dir} is a sweep of {spec.env} ({_preset_name(spec)}), not of {asked}: resume it "
                       "without --env/--preset, or start a new sweep in another --sweep-dir")
    state = sweep_dir / "tune"
    with ray_session(address, cpus, what="herl sweep"):
        if not tune.Tuner.can_restore(str(state)):  # killed before Tune wrote its state: start it again
            results = _tuner(spec, sweep_dir).fit()
        else:
            results = tune.Tuner.restore(str(state), trainable=_trainable(spec, sweep_dir), resume_unfinished=True,
                                         resume_errored=True).fit()
    return summarize(spec, sweep_dir, results)


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


def summarize(spec: SweepSpec, sweep_dir: Path, results: Any) -> SweepResult:
    """``summary.csv`` and ``best.toml`` from Tune's results; the rows, best first."""
    keys = [p.key for p in spec.search]
    sign = 1 if spec.mode == "max" else -1
    timesteps = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0]).timesteps
    trials = []
    for result in results:
        frame = result.metrics_dataframe
        curve = frame[spec.metric].dropna().tolist() if frame is not None and spec.metric in frame else []
        metrics = result.metrics or {}
        steps = int(metrics.get("time/total_timesteps", 0))
        status = "error" if result.error else "done" if steps >= timesteps else "stopped early"
        params = {k: v for k, v in (result.config or {}).items() if k != "seed"}
        seed = (result.config or {}).get("seed", spec.seeds[0])
        name = f"seed_{seed}" if not spec.search else f"trial_{metrics.get('trial_id', '?')}"
        trials.append({"run": f"runs/{name}", "seed": seed, "params": params, "final": curve[-1] if curve else None,
                       "best": (max if sign > 0 else min)(curve) if curve else None, "steps": steps, "status": status,
                       "resumed": int(metrics.get("resumed_from_step") or 0)})
    trials.sort(key=lambda t: (t["final"] is None, -sign * (t["final"] or 0.0), -sign * (t["best"] or 0.0)))
    headers = ["run", "seed", *keys, f"final {spec.metric}", f"best {spec.metric}", "steps", "status",
               "resumed from step"]
    rows = [[t["run"], t["seed"], *(_short(t["params"].get(k)) for k in keys), _short(t["final"]), _short(t["best"]),
             f"{t['steps']:,}", t["status"], f"{t['resumed']:,}" if t["resumed"] else "-"] for t in trials]
    with open(sweep_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(headers)
        writer.writerows([[t["run"], t["seed"], *(t["params"].get(k) for k in keys), t["final"], t["best"], t["steps"],
                           t["status"], t["resumed"] or ""] for t in trials])
    notes = [f"summary: {sweep_dir / 'summary.csv'}"]
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
        notes.append(f"best settings: herl train --config {sweep_dir / 'best.toml'}")
    notes.append(f"curves: herl plot {sweep_dir / 'runs'}")
    return SweepResult(headers, rows, notes)


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:.3g}" if abs(value) < 1e-2 or abs(value) >= 1e4 else f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)
