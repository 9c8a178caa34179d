"""Ray Tune's side of ``herl sweep``: a Tuner built from herl's own record of the sweep (``trials.json``).

Every session, the first and each ``--resume``, starts a new Tuner in a folder of its own under ``SWEEP_DIR/tune/``;
Tune's files from earlier sessions are never read. Tune's ``Tuner.restore`` would unpickle them (``tuner.pkl``, the
searcher's and scheduler's state, each trial's ``params.pkl``), and unpickling a crafted file runs its code. What
Tune would restore is rebuilt from herl's JSON record and the run folders instead:

- the unfinished trials are trials of the new Tuner, each with its run folder's name, so that it resumes the folder
  from its last checkpoint (:func:`herl.distributed.sweep.run_trial`); finished trials are not run again;
- a search's sampler learns the finished trials' results first (Optuna takes completed trials:
  ``add_evaluated_point``), and each resumed trial's result when it ends (:class:`ResumingSearch`);
- ASHA's rungs start with the earlier sessions' evaluations, read from the run folders' ``progress.csv``
  (:class:`ReplayedASHA`).

:class:`Recorder` (a Tune callback, in the driver) is the one writer of ``trials.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from herl.distributed.sweep import (
    RUN_KEY,
    SweepSpec,
    SweepState,
    TrialRecord,
    eval_curve,
    run_finished,
    run_trial,
    trial_name,
)
from herl.run.checkpoint import latest_checkpoint

TUNE_DIR = "tune"
"""Tune's working files, one folder per session; written for Tune's own use, never read by herl."""


def fit(spec: SweepSpec, sweep_dir: Path, state: SweepState) -> None:
    """Run the trials ``state`` says are left (and, for a search, the samples not drawn yet) on the Ray connected."""
    runs = sweep_dir / "runs"
    unfinished = state.unfinished()
    config = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0])
    if not spec.search:
        if not unfinished:
            return
        space: dict[str, Any] = {"seed": tune.grid_search([r.seed for r in unfinished])}
        tune_config = tune.TuneConfig(metric=spec.metric, mode=spec.mode)
    else:
        new = max(spec.trials - len(state.trials), 0)
        if not unfinished and not new:
            return
        finished = state.finished()
        curves = {r.run: eval_curve(runs / r.run, spec.metric) for r in state.trials}
        # a resumed search draws from a sampler seeded anew: the same seed would draw the first sessions' samples again
        seed = spec.seeds[0] if not state.trials else int(
            np.random.SeedSequence([spec.seeds[0], len(state.trials)]).generate_state(1)[0])
        searcher = ResumingSearch(
            seed=seed, resumes=[(r.run, r.params) for r in unfinished], next_index=state.next_index(runs),
            finished=[(r.params, curves[r.run][-1][1] if curves[r.run] else None) for r in finished])
        scheduler = None
        if spec.scheduler == "asha":
            until = {r.run: _checkpoint_step(runs / r.run) for r in unfinished}
            scheduler = ReplayedASHA(
                finished=[curves[r.run] for r in finished],
                resumed={run: [(s, v) for s, v in curves[run] if s <= step] for run, step in until.items()},
                time_attr="time/total_timesteps", max_t=config.timesteps, grace_period=max(config.timesteps // 4, 1),
                reduction_factor=3, stop_last_trials=False)  # a trial at max_t ends itself, writing its model
        space = {p.key: p.tune_domain(tune) for p in spec.search}
        tune_config = tune.TuneConfig(metric=spec.metric, mode=spec.mode, search_alg=searcher, scheduler=scheduler,
                                      num_samples=len(unfinished) + new)
    run_config = tune.RunConfig(name=_session_name(sweep_dir / TUNE_DIR), storage_path=str(sweep_dir / TUNE_DIR),
                                verbose=1, failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                                callbacks=[Recorder(spec, sweep_dir, state)])
    trainable = tune.with_resources(tune.with_parameters(run_trial, spec=spec, runs_dir=str(runs)),
                                    {"cpu": config.threads})
    tune.Tuner(trainable, param_space=space, tune_config=tune_config, run_config=run_config).fit()


def _session_name(root: Path) -> str:
    """A folder name under ``root`` that does not exist yet: Tune writes this session there and reads nothing."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, n = stamp, 1
    while (root / name).exists():
        name, n = f"{stamp}-{n}", n + 1
    return name


def _checkpoint_step(run_dir: Path) -> int:
    last = latest_checkpoint(run_dir) if (run_dir / "checkpoints").is_dir() else None
    return last.step if last else 0


class Recorder(tune.Callback):
    """Keeps ``trials.json`` as Tune runs the trials: which exist, their settings, their status, the step each
    resumed from. Runs in the driver; the only writer of the file."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path, state: SweepState) -> None:
        self.spec, self.runs, self.state = spec, sweep_dir / "runs", state
        self.timesteps = spec.trial_config({p.key: p.args[0] for p in spec.search}, spec.seeds[0]).timesteps

    def _record(self, trial: Any) -> TrialRecord:
        config = dict(trial.config)
        name = trial_name(config, self.spec)
        record = self.state.find(name)
        if record is None:  # a new sample of a search
            record = TrialRecord(run=name, seed=int(config.get("seed", self.spec.seeds[0])),
                                 params={p.key: config[p.key] for p in self.spec.search})
            self.state.trials.append(record)
        return record

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._record(trial).status = "running"
        self.state.save()

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        record = self._record(trial)
        resumed = int(result.get("resumed_from_step") or 0)
        if resumed != record.resumed_from:
            record.resumed_from = resumed
            self.state.save()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        reported = int((trial.last_result or {}).get("time/total_timesteps") or 0)
        done = reported >= self.timesteps or run_finished(self.runs / self._record(trial).run, self.timesteps)
        self._record(trial).status = "done" if done else "stopped early"
        self.state.save()

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._record(trial).status = "error"  # its retries (--max-failures) are spent; --resume tries it again
        self.state.save()


class ResumingSearch(Searcher):
    """Tune's ``OptunaSearch`` (TPE, seeded), continued from herl's record rather than from a pickled study.

    The finished trials' results are added to the study as completed trials before anything is sampled; the
    unfinished trials are suggested first, as they were (each with its run folder's name, so that it resumes it), and
    their results are added to the study when they end; new samples come from the sampler and are named
    ``trial_<N>`` after the highest number in use. Nothing is saved for Tune to restore (herl never restores Tune)."""

    def __init__(self, *, seed: int, resumes: list[tuple[str, dict[str, Any]]],
                 finished: list[tuple[dict[str, Any], float | None]], next_index: int) -> None:
        super().__init__()
        self._optuna = OptunaSearch(seed=seed)  # not named `searcher`: Tune would take it for a wrapper's
        self._resumes, self._finished, self._next = list(resumes), list(finished), next_index
        self._resumed: dict[str, dict[str, Any]] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        if not self._optuna.set_search_properties(metric, mode, config, **spec):
            return False
        self._metric, self._mode = metric, mode
        for params, value in self._finished:
            self._tell(params, value)
        return True

    def _tell(self, params: dict[str, Any], value: float | None) -> None:
        failed = value is None or not np.isfinite(value)
        self._optuna.add_evaluated_point(params, None if failed else float(value), error=failed)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._resumes:
            name, params = self._resumes.pop(0)
            self._resumed[trial_id] = params
            return {**params, RUN_KEY: name}
        config = self._optuna.suggest(trial_id)
        if config is None or config == Searcher.FINISHED:
            return config
        name, self._next = f"trial_{self._next:03d}", self._next + 1
        return {**config, RUN_KEY: name}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id not in self._resumed:
            self._optuna.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        if trial_id in self._resumed:
            self._tell(self._resumed.pop(trial_id), None if error else (result or {}).get(self._metric))
        else:
            self._optuna.on_trial_complete(trial_id, result=result, error=error)

    def save(self, checkpoint_path: str) -> None:
        """Nothing: herl's record of the trials is what a resumed sweep starts from."""


class ReplayedASHA(ASHAScheduler):
    """Tune's ASHA whose rungs start with the evaluations of earlier sessions: the finished trials' curves, and each
    resumed trial's curve up to its checkpoint (under the trial's new id, when Tune adds it). So a resumed search stops
    trials against all of its trials, as the uninterrupted one would, not only against this session's."""

    def __init__(self, *, finished: list[list[tuple[int, float]]], resumed: dict[str, list[tuple[int, float]]],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._finished, self._resumed = finished, resumed

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        super().on_trial_add(tune_controller, trial)
        bracket = self._trial_info[trial.trial_id]
        for i, curve in enumerate(self._finished):  # once, into the first bracket (herl's ASHA has one)
            self._replay(bracket, SimpleNamespace(trial_id=f"herl-finished-{i}"), curve)
        self._finished = []
        self._replay(bracket, trial, self._resumed.pop(trial.config.get(RUN_KEY), []))

    def _replay(self, bracket: Any, trial: Any, curve: list[tuple[int, float]]) -> None:
        for step, value in curve:  # what on_trial_result records; its decisions were taken when the values came
            bracket.on_result(trial, step, self._metric_op * value)
