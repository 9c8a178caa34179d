"""Runs on batched goal envs: ``herl train --env herl/BatchedPointReach-v0 --n-envs 1024``, and ``--resume``.

A batched env (:mod:`herl.batched`) steps ``n_envs`` copies at once as tensors on one device; a
:class:`~herl.batched.trainer.BatchedTrainer` collects from all of them and updates the model. The run folder is a
regular run's (:mod:`herl.run.train`): ``config.json``, ``progress.csv`` and TensorBoard events (``eval/success_rate``,
``rollout/success_rate``, ``train/*``, ``time/fps``, so ``herl plot`` reads it as any other), ``checkpoints/``, and at
the end ``model.zip`` and ``summary.json``; the run lock, the thread settings, the progress display and the stop on
SIGTERM or Ctrl-C are the regular run's too.

What differs is what a checkpoint holds: ``checkpoints/step_<N>/`` (named by ``checkpoints/latest.json``, as a
regular run's) holds what :meth:`BatchedTrainer.save` writes (``model.zip``, and ``trainer.zip``: the buffer, the
envs' state, the loop's counters) and ``run.json`` (the run's wall time). It is taken after a round of updates,
where a loaded trainer continues exactly: ``--resume`` on the CPU ends with the same weights as an uninterrupted run.

Evaluations play one episode in each of ``eval.episodes`` envs of a separate batched env, reset with a seed made of
the run's seed and the step, as a regular run's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from herl.io.atomic import atomic_write, fsync_folder
from herl.run.checkpoint import BATCHED_RUN_FILE as RUN_STATE_FILE
from herl.run.checkpoint import LATEST, MODEL_FILE, Checkpoint, atomic_write_text, checkpoints_folder, \
    latest_checkpoint, remove_partial_checkpoints, share_like_new_files
from herl.run.config import TrainConfig, algorithm_class
from herl.run.errors import CLIError, Interrupted
from herl.run.evaluate import EvalResult, check_spaces_fit
from herl.run.folders import CONFIG_FILE, SUMMARY_FILE, read_config
from herl.run.progress import Progress
from herl.run.runlog import RunLogger, open_run_logger
from herl.run.train import (
    MIN_BUFFER,
    OnEval,
    ReportEachEval,
    RunSummary,
    StopOnSignal,
    _chosen_buffer_size,
    _claim,
    _eval_history,
    _next_multiple,
    _run_settings,
    _summarize,
    check_algorithm_fits,
    first_loadable_checkpoint,
    new_run_folder,
    next_evaluation,
    resolved_config,
    restart_config,
    resumed_config,
    stopped_runs_say_where_they_continue,
)


# ---------------------------------------------------------------------------------------------------------------------
# Envs and models


def make_env(env_id: str, env_kwargs: Mapping[str, Any], n_envs: int, device: torch.device | str) -> Any:
    """``n_envs`` envs of the batched env ``env_id`` on ``device``; a CLIError naming the settings for a wrong one."""
    from herl.batched.registry import check_env_kwargs, make_batched_env

    try:
        check_env_kwargs(env_id, env_kwargs)
        return make_batched_env(env_id, n_envs, device, **dict(env_kwargs))
    except (TypeError, ValueError) as err:
        raise CLIError(f"cannot make {env_id}: {err} (env settings: --set env.NAME=VALUE)") from None


def _device(config: TrainConfig) -> torch.device:
    from herl.utils import get_device

    with warnings.catch_warnings():  # a CUDA device on a machine without one: the run's notes say it
        warnings.filterwarnings("ignore", message=r".* is not available here: using the CPU", category=UserWarning)
        try:
            return get_device(config.device)
        except ValueError as err:
            raise CLIError(str(err)) from None


def chosen_buffer_size(config: TrainConfig, env: Any) -> int:
    """The buffer_size herl gives a batched run whose settings name none: a regular run's choice, but never less
    than two episodes of every env (the buffer stores whole rounds of all envs)."""
    return max(_chosen_buffer_size(config.algo, config.timesteps), 2 * env.n_envs * env.max_episode_steps)


def build_model(config: TrainConfig, env: Any) -> Any:
    """The algorithm of ``config`` for the batched env ``env``: built from its single spaces on its device, with the
    config's hyperparameters, networks and noise (no env and no replay buffer: the trainer holds the buffer)."""
    from gymnasium import spaces

    from herl.training.noise import NormalActionNoise

    cls = algorithm_class(config.algo)
    check_algorithm_fits(config.algo, config.env, env.single_action_space)
    kwargs: dict[str, Any] = dict(config.hyperparameters)
    if "buffer_size" not in kwargs:  # a buffer_size the settings chose is never changed
        kwargs["buffer_size"] = chosen_buffer_size(config, env)
    if config.noise.type != "none":
        if not isinstance(env.single_action_space, spaces.Box):
            raise CLIError(f"noise.type={config.noise.type} needs a continuous (Box) action space; set noise.type=none")
        n = int(np.prod(env.single_action_space.shape))
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), config.noise.sigma * np.ones(n))
    try:
        return cls("MultiInputPolicy", observation_space=env.single_observation_space,
                   action_space=env.single_action_space, seed=config.seed, device=env.device,
                   policy_kwargs=config.policy.to_policy_kwargs(), **kwargs)
    except (ValueError, TypeError) as err:
        raise CLIError(f"cannot build {cls.__name__} for {config.env}: {err}") from err


def build_trainer(config: TrainConfig, model: Any, env: Any) -> Any:
    """The :class:`BatchedTrainer` of ``config``: its ``batched.*`` and ``her.*`` settings (no HER: plain replay)."""
    from herl.batched.trainer import BatchedTrainer

    her = config.her
    try:
        return BatchedTrainer(model, env, seed=config.seed, collect_steps=config.batched.collect_steps,
                              updates_per_step=config.batched.updates_per_step,
                              n_sampled_goal=her.n_sampled_goal if her else 0,
                              goal_selection_strategy=her.strategy if her else "future")
    except (ValueError, TypeError) as err:
        raise CLIError(f"cannot train on {config.env}: {err}") from err


def log_every(env: Any) -> int:
    """Env steps between two rows of rollout statistics: one episode of every env (``log_interval`` counts the
    episodes of one env at a time, which a batch of envs ends by the hundred each step)."""
    return env.n_envs * env.max_episode_steps


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation


def env_actions(space: Any, actions: torch.Tensor) -> torch.Tensor:
    """The policy's actions (``[-1, 1]`` for a Box, indices shaped ``(n, 1)`` for a Discrete) in the env's terms."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return actions.reshape(-1) + int(space.start)
    low = torch.as_tensor(space.low, device=actions.device)
    high = torch.as_tensor(space.high, device=actions.device)
    return low + 0.5 * (actions + 1.0) * (high - low)


@torch.no_grad()
def play_episodes(model: Any, env: Any, *, seed: int, deterministic: bool = True) -> tuple[np.ndarray, ...]:
    """``(returns, lengths, successes)`` of the first episode of each env of ``env``, reset with ``seed``, playing
    ``model``'s policy; success is read where each episode ends."""
    obs = env.reset(seed=seed)
    shape, device = (env.n_envs,), env.device
    done = torch.zeros(shape, dtype=torch.bool, device=device)
    success = torch.zeros(shape, dtype=torch.bool, device=device)
    returns = torch.zeros(shape, dtype=torch.float64, device=device)
    lengths = torch.zeros(shape, dtype=torch.int64, device=device)
    for _ in range(env.max_episode_steps):
        x = model.encoder.normalize(model.encoder.flatten(obs))
        step = env.step(env_actions(model.action_space, model._act(x, deterministic)))
        running = ~done
        returns += torch.where(running, step.reward.double(), 0.0)
        lengths += running.long()
        ended = (step.terminated | step.truncated) & running
        success |= ended & step.success
        done |= ended
        obs = step.obs
        if bool(done.all()):
            break
    else:
        raise RuntimeError(f"{type(env).__name__}: not every episode ended within max_episode_steps="
                           f"{env.max_episode_steps}: the env must truncate its episodes at that limit")
    return returns.cpu().numpy(), lengths.cpu().numpy(), success.cpu().numpy()


def evaluate_model(model: Any, env_id: str, env_kwargs: Mapping[str, Any], *, episodes: int, deterministic: bool,
                   seed: int, name: str) -> EvalResult:
    """``herl eval`` of a model trained on a batched env: one episode in each of ``episodes`` envs."""
    env = make_env(env_id, env_kwargs, episodes, model.device)
    check_spaces_fit(model, env.single_observation_space, env.single_action_space, env_id, env_kwargs)
    returns, lengths, successes = play_episodes(model, env, seed=seed, deterministic=deterministic)
    return EvalResult(name, model.num_timesteps, episodes, float(np.mean(successes)), float(np.mean(returns)),
                      float(np.std(returns)), float(np.mean(lengths)))


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints: checkpoints/step_<N>/ and latest.json, as a regular run's, holding the trainer's files


def _name(step: int) -> str:
    return f"step_{step:012d}"


def write_checkpoint(run_dir: Path, trainer: Any, *, wall_time: float, keep: int) -> Checkpoint:
    """Save the trainer into ``checkpoints/step_<N>/`` (through a temporary folder renamed into place when
    complete), name it in ``latest.json``, keep the ``keep`` newest."""
    root = checkpoints_folder(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    step = trainer.model.num_timesteps
    latest = latest_checkpoint(run_dir)
    if latest is not None and latest.step == step:
        return latest
    final = root / _name(step)
    tmp = root / f".tmp-{final.name}"  # the prefix remove_partial_checkpoints looks for
    for stale in (final, tmp):  # left by a process killed before latest.json named it
        if stale.exists():
            shutil.rmtree(stale)
    trainer.save(tmp)  # itself written through a temporary folder
    atomic_write(tmp / RUN_STATE_FILE, json.dumps({"step": step, "wall_time": wall_time}))
    os.replace(tmp, final)
    fsync_folder(root)
    atomic_write_text(root / LATEST, json.dumps({"step": step, "path": final.name}))
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return Checkpoint(final, step)


def remove_partial(run_dir: Path) -> None:
    """Delete what a process killed while writing left: the regular run's leftovers, and the temporary folders of
    :meth:`BatchedTrainer.save` (``.<name>.<random>.tmp``). Call it holding the run's lock."""
    remove_partial_checkpoints(run_dir)
    for tmp in checkpoints_folder(run_dir).glob(".*.tmp"):
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)


def load_checkpoint(checkpoint: Checkpoint, env: Any) -> tuple[Any, float]:
    """``(trainer, wall_time)`` of ``checkpoint``, continuing with ``env`` (fresh envs of the run's settings)."""
    from herl.batched.trainer import BatchedTrainer

    trainer = BatchedTrainer.load(checkpoint.path, env)
    state = json.loads((checkpoint.path / RUN_STATE_FILE).read_text(encoding="utf-8"))
    return trainer, float(state["wall_time"])


def _load_usable_checkpoint(run_dir: Path, checkpoint: Checkpoint, env: Any) -> tuple[Any, float, Any]:
    """Load ``checkpoint``; if it is damaged, the newest older one that loads, saying so."""
    return first_loadable_checkpoint(run_dir, checkpoint, lambda c: load_checkpoint(c, env),
                                     errors=(ValueError, KeyError, TypeError))


# ---------------------------------------------------------------------------------------------------------------------
# The run


class _RunLoop:
    """What happens between the trainer's rounds: progress, rows of rollout statistics, evaluations, checkpoints, and
    a stop on request. Called with the trainer after each round (after its updates: where a checkpoint resumes
    exactly); returns False to stop."""

    def __init__(self, *, config: TrainConfig, run_dir: Path, trainer: Any, eval_env: Any, logger: RunLogger,
                 progress: Progress, history: list[tuple[int, float | None, float]], on_eval: OnEval | None) -> None:
        self.config, self.run_dir, self.trainer, self.eval_env = config, run_dir, trainer, eval_env
        self.logger, self.progress, self.history, self.on_eval = logger, progress, history, on_eval
        self.stop: StopOnSignal | None = None
        self.stopped_at: int | None = None
        self._logged = len(trainer.log)  # the rows a resumed run's log held already were written before
        step = trainer.model.num_timesteps
        self._next_eval = _next_multiple(step, config.eval.freq)
        self._next_checkpoint = _next_multiple(step, config.checkpoint.freq)

    def start(self, fresh: bool) -> None:
        """Evaluate before the first round where the run is due to: a fresh one at step 0, a resumed one where a stop
        pre-empted an evaluation (:func:`herl.run.train.next_evaluation`)."""
        step = self.trainer.model.num_timesteps
        self._next_eval = next_evaluation(step, self.config.eval.freq, None if fresh else self.history)
        if self.config.eval.freq and step >= self._next_eval:
            self.evaluate()
            self._next_eval = _next_multiple(step, self.config.eval.freq)

    def __call__(self, trainer: Any) -> bool:
        step = trainer.model.num_timesteps
        self.progress.update(step)
        self.write_rows()
        if self.stop is not None and self.stop.requested:
            self.checkpoint()
            self.stopped_at = step
            return False
        if self.config.eval.freq and step >= self._next_eval:
            self.evaluate()
            self._next_eval = _next_multiple(step, self.config.eval.freq)
        if self.config.checkpoint.freq and step >= self._next_checkpoint:
            self.checkpoint()
            self._next_checkpoint = _next_multiple(step, self.config.checkpoint.freq)
        return True

    def write_rows(self) -> None:
        """The trainer's new log lines, as rows of progress.csv (the regular loop's keys)."""
        model = self.trainer.model
        for line in self.trainer.log[self._logged:]:
            logger = self.logger
            logger.record("time/fps", int(line["steps_per_s"]))
            logger.record("rollout/episodes", int(line["episodes"]))
            if not np.isnan(line["success_rate"]):
                logger.record("rollout/success_rate", float(line["success_rate"]))
            for key, value in line.items():
                if key.startswith("train/"):
                    logger.record(key, value)
            logger.record("train/n_updates", int(line["updates"]))
            logger.record("train/learning_rate", model.config.learning_rate)
            logger.dump(int(line["timesteps"]))
        self._logged = len(self.trainer.log)

    def evaluate(self) -> None:
        model, config = self.trainer.model, self.config
        step = model.num_timesteps
        seed = int(np.random.SeedSequence([config.seed, step]).generate_state(1)[0])
        returns, lengths, successes = play_episodes(model, self.eval_env, seed=seed,
                                                    deterministic=config.eval.deterministic)
        success, mean_return, mean_length = float(np.mean(successes)), float(np.mean(returns)), float(np.mean(lengths))
        self.logger.record("eval/mean_reward", mean_return)
        self.logger.record("eval/mean_ep_length", mean_length)
        self.logger.record("eval/success_rate", success)
        self.logger.dump(step)
        self.history.append((step, success, mean_return))
        if self.on_eval is not None:
            if isinstance(self.on_eval, ReportEachEval):  # a sweep's trial, which may end at this report
                model.save(self.run_dir / MODEL_FILE)
                share_like_new_files(self.run_dir / MODEL_FILE)
            self.on_eval({"time/total_timesteps": step, "eval/mean_reward": mean_return,
                          "eval/mean_ep_length": mean_length, "eval/success_rate": success})
        self.progress.set_success(success)
        self.progress.restart_rate()

    def checkpoint(self) -> None:
        write_checkpoint(self.run_dir, self.trainer, wall_time=self.logger.wall_time(),
                         keep=self.config.checkpoint.keep)
        self.progress.restart_rate()


def _train(trainer: Any, config: TrainConfig, run_dir: Path, *, resume_step: int | None, wall_time_before: float,
           progress_mode: str, position: int, on_eval: OnEval | None) -> RunSummary:
    """Train to ``config.timesteps``; evaluate, checkpoint, save ``model.zip`` and ``summary.json``."""
    model, fresh = trainer.model, resume_step is None
    logger = open_run_logger(run_dir, resume_step=resume_step, wall_time_before=wall_time_before)
    eval_env = make_env(config.env, config.env_kwargs, config.eval.episodes, trainer.env.device)
    progress = Progress(total=config.timesteps, initial=model.num_timesteps, label=f"seed {config.seed}",
                        mode=progress_mode, position=position)
    loop = _RunLoop(config=config, run_dir=run_dir, trainer=trainer, eval_env=eval_env, logger=logger,
                    progress=progress, history=[] if fresh else _eval_history(run_dir), on_eval=on_eval)
    resume = f"`herl train --resume {shlex.quote(str(run_dir))}`"
    try:
        with stopped_runs_say_where_they_continue(run_dir, model):
            with StopOnSignal(run_dir) as stop:
                loop.stop = stop
                try:
                    loop.start(fresh)
                    trainer.learn(config.timesteps, log_every=log_every(trainer.env), callback=loop)
                except KeyboardInterrupt:
                    last = latest_checkpoint(run_dir)
                    where = f"its last checkpoint, step {last.step:,}" if last else "the start (no checkpoint yet)"
                    raise Interrupted(f"stopped at once; {resume} continues from {where}",
                                      how="stopped at once") from None
                if loop.stopped_at is not None:
                    raise Interrupted(f"stopped by {stop.signal_name} at step {loop.stopped_at:,}; a checkpoint was "
                                      f"written: continue with {resume}", how=f"stopped by {stop.signal_name}")
            if config.eval.freq and (not loop.history or loop.history[-1][0] != model.num_timesteps):
                loop.evaluate()
            loop.checkpoint()  # clamps the progress left, for the model file too
            model.save(run_dir / MODEL_FILE)
            share_like_new_files(run_dir / MODEL_FILE)
    finally:
        progress.close()
        logger.close()
    summary = _summarize(run_dir, config, model.num_timesteps, logger.wall_time(), loop.history)
    atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(dataclasses.asdict(summary), indent=1))
    if stop.requested:
        raise stop.finished_anyway(model.num_timesteps)
    return summary


def _start(config: TrainConfig, run_dir: Path, *, progress: str, position: int, on_eval: OnEval | None,
           threads: int | None) -> RunSummary:
    with _run_settings(config, threads):
        device = _device(config)
        env = make_env(config.env, config.env_kwargs, config.n_envs, device)
        model = build_model(config, env)
        resolved = resolved_config(config, model, list(config.notes),
                                   f"the run's steps, at least {MIN_BUFFER:,} and two episodes of every env")
        trainer = build_trainer(resolved, model, env)
        atomic_write_text(run_dir / CONFIG_FILE, json.dumps(resolved.to_json(), indent=1))
        return _train(trainer, resolved, run_dir, resume_step=None, wall_time_before=0.0, progress_mode=progress,
                      position=position, on_eval=on_eval)


def start_run(config: TrainConfig, run_dir: Path, *, progress: str = "auto", position: int = 0,
              on_eval: OnEval | None = None, threads: int | None = None) -> RunSummary:
    """Train a new run of ``config`` (a batched env) in ``run_dir`` (created; it must not hold a run already);
    ``on_eval`` is called with each evaluation's results."""
    run_dir = Path(run_dir)
    with new_run_folder(run_dir), _claim(run_dir):  # under the lock: two commands cannot both start it
        if (run_dir / CONFIG_FILE).exists():
            raise CLIError(f"{run_dir} already holds a run: continue it with `herl train --resume "
                           f"{shlex.quote(str(run_dir))}`, or choose another --run-dir")
        return _start(config, run_dir, progress=progress, position=position, on_eval=on_eval, threads=threads)


def resume_run(run_dir: Path, *, timesteps: int | None = None, progress: str = "auto", position: int = 0,
               on_eval: OnEval | None = None, threads: int | None = None) -> RunSummary:
    """Continue the batched run in ``run_dir`` from its latest checkpoint (to ``timesteps`` if given; with
    ``threads`` torch threads this time if given, its config's otherwise)."""
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    with _claim(run_dir):
        remove_partial(run_dir)
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            return _start(restart_config(run_dir, config, timesteps), run_dir, progress=progress, position=position,
                          on_eval=on_eval, threads=threads)
        config, finished = resumed_config(run_dir, config, checkpoint.step, timesteps)
        if finished is not None:
            return finished
        with _run_settings(config, threads):  # this session's threads only: config.json keeps the run's own
            env = make_env(config.env, config.env_kwargs, config.n_envs, _device(config))
            trainer, wall_time, checkpoint = _load_usable_checkpoint(run_dir, checkpoint, env)
            return _train(trainer, config, run_dir, resume_step=checkpoint.step, wall_time_before=wall_time,
                          progress_mode=progress, position=position, on_eval=on_eval)
