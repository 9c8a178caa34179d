"""Training runs: a run folder per seed, periodic evaluations and checkpoints, resume, several seeds in parallel.

A run folder (one seed) holds ``config.json`` (the resolved :class:`~herl.run.config.TrainConfig`),
``progress.csv`` and TensorBoard events, ``checkpoints/``, and at the end ``model.zip`` and ``summary.json``.
``herl train`` puts the seeds of one command in ``RUN_DIR/seed_<S>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import multiprocessing
import os
import shlex
import signal
import stat
import sys
import threading
import time
import warnings
import concurrent.futures
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from herl.run.checkpoint import (
    MODEL_FILE,
    atomic_write_text,
    complete_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    remove_partial_checkpoints,
    share_like_new_files,
    write_checkpoint,
)
from herl.errors import NonFiniteError
from herl.run.config import TrainConfig, algorithm_class
from herl.run.envs import endless_episode_guard, make_env, make_training_env
from herl.run.errors import CLIError, Interrupted, WorkersLost, herl_warnings_as_lines
from herl.run.folders import CONFIG_FILE, SUMMARY_FILE, read_config, read_progress
from herl.run.folders import find_seed_runs  # noqa: F401 (herl.run.train's name before run.folders held it)
from herl.run.progress import Progress
from herl.run.runlog import RunLogger, open_run_logger
from herl.training.callbacks import BaseCallback
from herl.utils import flush_denormals

LOCK_FILE = "train.pid"
SUCCESS_THRESHOLD = 0.95
# A buffer larger than the run's steps never fills: cap it there (saves memory and checkpoint size) but not below
# this, so short runs can still be extended with --resume --timesteps.
MIN_BUFFER = 10_000


def threads_per_run(threads: int, parallel: int, cpus: int) -> int:
    """The torch threads each of ``parallel`` runs training at once on ``cpus`` cores gets: ``threads``, or fewer,
    so that the runs' threads together fit the cores (one at least). Torch's threads spin while they wait for one
    another; beyond the cores they wait for a core as well: four runs of two threads each on 2 cores trained at a
    third of the speed of four runs of one thread (docs/cli.md, "Threads")."""
    return max(1, min(threads, cpus // parallel))


def _chosen_buffer_size(algo: str, timesteps: int) -> int:
    """The buffer_size herl gives a run of ``timesteps`` steps whose settings name none."""
    return int(min(algorithm_class(algo).config_class.buffer_size, max(timesteps, MIN_BUFFER)))


def _chosen_buffer_note(size: int) -> str:
    """How the note on a buffer_size herl chose begins (a resumed run finds it in its config's notes)."""
    return f"buffer_size={size:,} chosen by herl"


@dataclass(frozen=True)
class RunSummary:
    """How a run went; written to ``summary.json``."""

    run_dir: str
    seed: int
    steps: int
    wall_time: float
    final_success: float | None
    best_success: float | None
    first_step_at_threshold: int | None
    """First evaluation step with success rate >= :data:`SUCCESS_THRESHOLD`."""
    final_mean_reward: float | None
    notes: tuple[str, ...] = ()
    """What the run decided that the settings did not say (e.g. the buffer_size it chose), and how it ended."""


def build_model(config: TrainConfig, env: Any) -> Any:
    """The algorithm of ``config`` on ``env``, with its replay buffer, noise and networks."""
    from gymnasium import spaces

    from herl.buffers import HerReplayBuffer
    from herl.training.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    cls = algorithm_class(config.algo)
    kwargs: dict[str, Any] = dict(config.hyperparameters)
    if "buffer_size" not in kwargs:  # a buffer_size the user (or the preset) chose is never changed
        kwargs["buffer_size"] = _chosen_buffer_size(config.algo, config.timesteps)
    if config.her is not None:
        her = config.her
        kwargs["replay_buffer_class"] = HerReplayBuffer
        kwargs["replay_buffer_kwargs"] = {"n_sampled_goal": her.n_sampled_goal, "goal_selection_strategy": her.strategy,
                                          "online_sampling": her.online_sampling, "copy_info_dict": her.copy_info_dict}
        if her.desired_goal_share:
            kwargs["replay_buffer_kwargs"]["desired_goal_share"] = her.desired_goal_share
        if config.demos is not None:
            kwargs["replay_buffer_kwargs"].update(demonstrations=config.demos.path,
                                                  demo_batch_ratio=config.demos.batch_ratio)
    action_space = env.single_action_space if hasattr(env, "single_action_space") else env.action_space
    if config.noise.type != "none":
        if not isinstance(action_space, spaces.Box):
            raise CLIError(f"noise.type={config.noise.type} needs a continuous (Box) action space; set noise.type=none")
        n = int(np.prod(action_space.shape))
        noise_cls = NormalActionNoise if config.noise.type == "normal" else OrnsteinUhlenbeckActionNoise
        kwargs["action_noise"] = noise_cls(np.zeros(n), config.noise.sigma * np.ones(n))
    observation_space = env.single_observation_space if hasattr(env, "single_observation_space") else env.observation_space
    policy = "MultiInputPolicy" if isinstance(observation_space, spaces.Dict) else "MlpPolicy"
    try:
        with warnings.catch_warnings():  # a CUDA device on a machine without one: the run's notes say it (_start_in)
            warnings.filterwarnings("ignore", message=r".* is not available here: using the CPU", category=UserWarning)
            return cls(policy, env, seed=config.seed, device=config.device,
                       policy_kwargs=config.policy.to_policy_kwargs(), **kwargs)
    except (ValueError, TypeError) as err:
        raise CLIError(f"cannot build {cls.__name__} for {config.env}: {err}") from err


def check_algorithm_fits(algo: str, env_id: str, action_space: Any) -> None:
    """DQN needs discrete actions, the others continuous ones: say which to use instead."""
    from gymnasium import spaces

    from herl.envs.checks import action_space_fix

    fix = action_space_fix(action_space)
    if fix is not None:
        raise CLIError(f"{env_id}: {fix}")
    discrete = isinstance(action_space, spaces.Discrete)
    if algo == "dqn" and not discrete:
        raise CLIError(f"dqn needs a Discrete action space; {env_id}'s is {action_space}: use --algo sac, tqc, crossq, td3 or ddpg")
    if algo != "dqn" and not isinstance(action_space, spaces.Box):
        hint = "use --algo dqn" if discrete else "herl's algorithms take Discrete (dqn) or Box (ddpg, td3, sac, tqc, crossq) actions"
        raise CLIError(f"{algo} needs a continuous (Box) action space; {env_id}'s is {action_space}: {hint}")


class RunCallback(BaseCallback):
    """Evaluations and checkpoints at rollout starts (after the previous rollout's updates), and the progress display.

    Evaluations run on their own env, reset with a seed made of the run's seed and the step, so they never touch
    the training state and a resumed run evaluates as the uninterrupted one would.
    """

    def __init__(self, *, config: TrainConfig, run_dir: Path, eval_env: Any, progress: Progress, fresh: bool,
                 history: list[tuple[int, float | None, float]], on_eval: OnEval | None = None) -> None:
        super().__init__()
        self.on_eval = on_eval
        self.config, self.run_dir, self.eval_env, self.progress, self.fresh = config, run_dir, eval_env, progress, fresh
        self.history = history  # (step, success rate, mean reward) of every evaluation, resumed runs' included
        self._next_eval = self._next_checkpoint = 0
        self.stop: StopOnSignal | None = None
        self.remote_evaluate: Callable[[int, bool, int], tuple[list[float], list[int], list[bool]]] | None = None
        """With ``eval.on_workers``: plays evaluation episodes on the Ray actors while they are up (set by them)."""

    def use_remote_evaluate(self, evaluate: Callable[[int, bool, int], Any] | None) -> None:
        self.remote_evaluate = evaluate

    @property
    def run_logger(self) -> RunLogger:
        return self.model.logger

    def _on_training_start(self) -> None:
        step = self.model.num_timesteps
        self._next_eval = next_evaluation(step, self.config.eval.freq, None if self.fresh else self.history)
        if self.config.eval.freq and step >= self._next_eval:  # a fresh run's at step 0, or one a stop pre-empted
            self.evaluate()
            self._next_eval = _next_multiple(step, self.config.eval.freq)
        self._next_checkpoint = _next_multiple(step, self.config.checkpoint.freq)

    def _on_rollout_start(self) -> None:
        step = self.model.num_timesteps
        if self.stop is not None and self.stop.requested:
            # the one point where a checkpoint resumes exactly (after the previous rollout's gradient steps)
            self.checkpoint()
            raise Stopped(step)
        if self.config.eval.freq and step >= self._next_eval:
            self.evaluate()
            self._next_eval = _next_multiple(step, self.config.eval.freq)
        if self.config.checkpoint.freq and step >= self._next_checkpoint:
            self.checkpoint()
            self._next_checkpoint = _next_multiple(step, self.config.checkpoint.freq)

    def _on_step(self) -> bool:
        self.progress.update(self.model.num_timesteps)
        return True

    def evaluate(self) -> None:
        from herl.training.evaluation import evaluate_policy

        step = self.model.num_timesteps
        seed = int(np.random.SeedSequence([self.config.seed, step]).generate_state(1)[0])
        if self.remote_evaluate is not None:
            rewards, lengths, successes = self.remote_evaluate(self.config.eval.episodes,
                                                               self.config.eval.deterministic, seed)
        else:
            rewards, lengths, successes = evaluate_policy(
                self.model, self.eval_env, n_eval_episodes=self.config.eval.episodes,
                deterministic=self.config.eval.deterministic, return_episode_rewards=True, return_success_rate=True,
                seed=seed, callback=endless_episode_guard(self.eval_env, self.config.env),
            )
        success = float(np.mean(successes)) if successes else None
        logger = self.run_logger
        logger.record("eval/mean_reward", float(np.mean(rewards)))
        logger.record("eval/mean_ep_length", float(np.mean(lengths)))
        if success is not None:
            logger.record("eval/success_rate", success)
        logger.dump(step)
        self.history.append((step, success, float(np.mean(rewards))))
        if self.on_eval is not None:
            if isinstance(self.on_eval, ReportEachEval):
                self.model.save(self.run_dir / MODEL_FILE)
                share_like_new_files(self.run_dir / MODEL_FILE)
            metrics = {"time/total_timesteps": step, "eval/mean_reward": float(np.mean(rewards)),
                       "eval/mean_ep_length": float(np.mean(lengths))}
            self.on_eval(metrics if success is None else {**metrics, "eval/success_rate": success})
        self.progress.set_success(success)
        self.progress.restart_rate()

    def checkpoint(self) -> None:
        write_checkpoint(self.run_dir, self.model, self.model._raw_env, wall_time=self.run_logger.wall_time(),
                         keep=self.config.checkpoint.keep)
        self.progress.restart_rate()


OnEval = Callable[[dict[str, float]], None]
"""Called with each evaluation's results (``eval/success_rate``, ``eval/mean_reward``, ``eval/mean_ep_length``,
``time/total_timesteps``): how a sweep's trial reports to Ray Tune."""


@dataclass(frozen=True)
class ReportEachEval:
    """The ``on_eval`` of a sweep's trial: before each evaluation's results go to ``report``, the model just evaluated
    is written to the run's model file, since the sweep's scheduler may end the trial's process at any report without
    a word (a trial stopped early then still has the model it was judged by; one that finishes writes its last model
    as every run does). Other runs write their model file at their end only: one there means the run finished."""

    report: OnEval

    def __call__(self, metrics: dict[str, float]) -> None:
        self.report(metrics)


class Stopped(Exception):
    """Training stopped on request (SIGTERM, Ctrl-C) after writing a checkpoint at ``step``."""

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step


def where_a_stopped_run_continues(run_dir: Path, *, settings_note: bool = False) -> str:
    """The sentence on where a run an error stopped continues once the cause is fixed: its last checkpoint, or a new
    start where it has none."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return (f"The run {run_dir} has no checkpoint yet: once the cause is fixed, start it again in a new --run-dir "
                "(or delete this one)")
    return (f"The run's last checkpoint, {checkpoint.path} (step {checkpoint.step:,}), was taken before this: once the "
            f"cause is fixed, `herl train --resume {shlex.quote(str(run_dir))}` continues from it"
            + (" (with the run's settings; to train with others, such as a lower learning_rate, start a new run with "
               "--set)" if settings_note else ""))


def non_finite_stop_message(err: Exception, run_dir: Path) -> str:
    """What ``herl train`` says when the NaN guard stops a run: the guard's message (the cause and its fix) and the
    checkpoint the run can continue from once the cause is fixed. One line."""
    where = where_a_stopped_run_continues(run_dir, settings_note=True)
    return " ".join(f"{str(err).rstrip('. ')}. {where}.".split())


@contextlib.contextmanager
def stopped_runs_say_where_they_continue(run_dir: Path, model: Any) -> Iterator[None]:
    """Around training a run: the NaN guard's stop becomes one line (a mistake to fix, not a bug: no traceback) with
    the checkpoint to continue from; any other error but herl's one-line ones keeps its traceback and gets that note."""
    try:
        yield
    except NonFiniteError as err:
        raise CLIError(non_finite_stop_message(err, run_dir)) from None
    except CLIError:
        raise  # one line that says what to do
    except Exception as err:  # the env's code, a bug
        note_where_a_crashed_run_continues(err, run_dir, model.num_timesteps)
        raise


def note_where_a_crashed_run_continues(err: BaseException, run_dir: Path, step: int) -> None:
    """Add to an unexpected error that stopped training (the env's own code raising, a bug) the step it stopped at
    and where the run continues from; Python prints the note under the traceback. Checkpoints are written whole at
    rollout starts, so the last one is sound whatever failed after it."""
    note = f"herl train: the run stopped at step {step:,} on this error. {where_a_stopped_run_continues(run_dir)}."
    if hasattr(err, "add_note"):  # Python 3.11+
        err.add_note(note)
    else:  # pragma: no cover - Python 3.10
        print(note, file=sys.stderr, flush=True)


# In a --jobs worker process (None elsewhere): the stop signals it received, while training or not (starting up,
# between runs). A run that starts after one (queued before the parent cancelled it) stops at its first rollout start;
# see _init_worker.
_worker_stop_signals: list[str] | None = None


class _OnStopSignals:
    """A context that handles SIGTERM and SIGINT with ``_handle`` while it is entered (in the main thread only, the
    one that may set handlers), and puts the previous handlers back after; after a stop, once one more of them has
    arrived (see :class:`_AfterStop`)."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Whether a signal has stopped the training this context covers."""
        raise NotImplementedError

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        after_stop = _AfterStop(self._previous) if self.stopping else None
        for signum, handler in self._previous.items():
            signal.signal(signum, after_stop or handler)


class _AfterStop:
    """The handler of SIGTERM and SIGINT once a signal has stopped training and the process is on its way out (its
    checkpoint written, or stopped at once on request): the next one is taken without effect, so that a scheduler's or
    a user's repeated signal does not turn the command's exit status 130 into death by the signal; then the handlers
    from before training are back, and a further signal acts as it would have."""

    def __init__(self, previous: dict[int, Any]) -> None:
        self.previous = dict(previous)

    def __call__(self, signum: int, frame: Any) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        print(f"\nherl train: {signal.Signals(signum).name}: already stopping (send it again to end the process at "
              "once)", file=sys.stderr, flush=True)


class StopOnSignal(_OnStopSignals):
    """While installed, SIGTERM and SIGINT (Ctrl-C) ask training to stop at the next rollout start, where a checkpoint
    resumes exactly (within seconds: one rollout and its updates); a second signal stops at once (a stopped
    run lost everything since its last checkpoint, silently)."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        earlier = _worker_stop_signals or []
        self.run_dir, self.requested, self.signal_name = run_dir, bool(earlier), "".join(earlier[:1])

    @property
    def stopping(self) -> bool:
        return self.requested

    def finished_anyway(self, step: int) -> Interrupted:
        """What stops the command when the signal came after the run's last rollout start: the run finished and wrote
        its files, and no run after it starts (the other seeds of ``herl train --seed 0 1 2``)."""
        return Interrupted(f"stopped by {self.signal_name} as the run finished at step {step:,}: its model and summary "
                           "are written", how=f"stopped by {self.signal_name}")

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signal_name = True, signal.Signals(signum).name
        if _worker_stop_signals is not None:
            _worker_stop_signals.append(self.signal_name)
        print(f"\nherl train: {self.signal_name}: writing a checkpoint of {self.run_dir} at the next rollout start, "
              "then stopping (send it again to stop at once)", file=sys.stderr, flush=True)


def _next_multiple(step: int, freq: int) -> int:
    return (step // freq + 1) * freq if freq else 0


def next_evaluation(step: int, freq: int, history: list[tuple[int, float | None, float]] | None) -> int:
    """The step from which a run at ``step`` evaluates next: 0 for a fresh run (``history`` None: it evaluates
    first); for a resumed one, the schedule of the run never stopped, from its last logged evaluation. A stop that
    came at a rollout start where an evaluation was due wrote its checkpoint first, so the resumed run owes that
    evaluation and makes it at once, as the run never stopped made it at that step."""
    if history is None:
        return 0
    return _next_multiple(history[-1][0], freq) if history and freq else _next_multiple(step, freq)


@contextlib.contextmanager
def _claim(run_dir: Path):
    """Hold an exclusive OS lock on ``run_dir/train.pid`` while training, so that a second process cannot train the
    same run at the same time (two ``--resume`` both trained one folder, 1 time in 6).

    The lock is ``fcntl.flock`` where there is one: the OS releases it when the process dies, however it dies, so a
    stale file never blocks. The file itself is never deleted (deleting it would let a third process lock a new file
    while the second still holds the old one); it only says which process holds it. Without ``fcntl`` (Windows) the
    file is created exclusively instead, and one naming a dead process is taken over.
    """
    lock = run_dir / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        fcntl = None
    if fcntl is None:  # pragma: no cover - Windows
        with _exclusive_create(lock):
            yield
        return
    try:  # never through a link: a run folder from elsewhere could point its lock at any file of the user's
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise CLIError(f"{lock} is a symbolic link: herl writes which process trains the run there and never "
                       "follows a link out of the run folder; remove the link") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise CLIError(f"{lock} is not a file of its own (a device, a pipe or a hard link to another file): "
                           "remove it, and herl writes a new one")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise CLIError(f"{run_dir} is being trained by process {holder}; wait for it or stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def _exclusive_create(lock: Path):  # pragma: no cover - Windows
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            text = lock.read_text().strip()
            if text.isdigit() and _alive(int(text)):
                raise CLIError(f"{lock.parent} is being trained by process {text}; wait for it or stop it first") from None
            lock.unlink(missing_ok=True)  # left by a dead process
    else:
        raise CLIError(f"{lock.parent} is being claimed by another process; try again")
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        yield
    finally:
        if lock.read_text().strip() == str(os.getpid()):  # never remove another process's claim
            lock.unlink(missing_ok=True)


def _alive(pid: int) -> bool:  # pragma: no cover - Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, AttributeError):
        return True  # someone else's process, or no way to tell: assume alive
    return True


def _train(model: Any, config: TrainConfig, run_dir: Path, *, resume_step: int | None, wall_time_before: float,
           progress_mode: str, position: int, on_eval: OnEval | None,
           worker_learner: WorkerLearner | None) -> RunSummary:
    """Train ``model`` to ``config.timesteps``; evaluate, checkpoint, save ``model.zip`` and ``summary.json``."""
    fresh = resume_step is None
    logger = open_run_logger(run_dir, resume_step=resume_step, wall_time_before=wall_time_before)
    if not fresh and model.logger is not None:  # what the checkpoint's run had recorded and not yet logged
        logger.take_pending(model.logger.pending())
    model.set_logger(logger)
    eval_env = make_env(config.env, dict(config.env_kwargs))
    progress = Progress(total=config.timesteps, initial=model.num_timesteps, label=f"seed {config.seed}",
                        mode=progress_mode, position=position)
    callback = RunCallback(config=config, run_dir=run_dir, eval_env=eval_env, progress=progress, fresh=fresh,
                           history=[] if fresh else _eval_history(run_dir), on_eval=on_eval)
    learn, notes = _learner(model, config, callback, worker_learner)
    try:
        with stopped_runs_say_where_they_continue(run_dir, model):
            with StopOnSignal(run_dir) as stop:
                callback.stop = stop
                try:
                    learn(config.timesteps - model.num_timesteps, callback=callback, log_interval=config.log_interval,
                          reset_num_timesteps=fresh)
                except WorkersLost as lost:  # between whole episodes: the model and buffer are consistent, keep them
                    callback.checkpoint()
                    raise WorkersLost(f"{lost}; training stopped at env step {model.num_timesteps:,} with a "
                                      f"checkpoint: continue with `herl train --resume {shlex.quote(str(run_dir))}`"
                                      ) from None
                except Stopped as stopped:
                    raise Interrupted(f"stopped by {stop.signal_name} at step {stopped.step:,}; a checkpoint was "
                                      f"written: continue with `herl train --resume {shlex.quote(str(run_dir))}`",
                                      how=f"stopped by {stop.signal_name}") from None
                except KeyboardInterrupt:
                    last = latest_checkpoint(run_dir)
                    where = f"its last checkpoint, step {last.step:,}" if last else "the start (no checkpoint yet)"
                    raise Interrupted(f"stopped at once; `herl train --resume {shlex.quote(str(run_dir))}` continues "
                                      f"from {where}", how="stopped at once") from None
            if config.eval.freq and (not callback.history or callback.history[-1][0] != model.num_timesteps):
                callback.evaluate()
            callback.checkpoint()
            model.save(run_dir / MODEL_FILE)
            share_like_new_files(run_dir / MODEL_FILE)
    finally:
        progress.close()
        logger.close()
        eval_env.close()
    extra = list(notes())
    if getattr(model, "compile_seconds", None) is not None:  # compile=True: the one-off cost, said once
        extra.append(f"compile=true: the update compiled in {model.compile_seconds:.1f} s (this session)")
        print(f"herl train: note: {extra[-1]}", file=sys.stderr, flush=True)
    summary = _summarize(run_dir, config, model.num_timesteps, logger.wall_time(), callback.history, extra)
    atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(dataclasses.asdict(summary), indent=1))
    if stop.requested:
        raise stop.finished_anyway(model.num_timesteps)
    return summary


Learner = Callable[..., Any]
"""What trains a model: ``model.learn``'s signature without the model (``learn(total_timesteps, callback=...,
log_interval=..., reset_num_timesteps=...)``)."""


@dataclass(frozen=True)
class WorkerLearner:
    """How a run with ``workers`` learns from Ray actors. The floor above this one provides it
    (:data:`herl.distributed.runs.WORKER_LEARNER`, which the command line passes): nothing in ``herl.run`` imports
    ``herl.distributed``, so a run without workers never imports Ray."""

    check: Callable[[int], None]
    """Refuse ``workers`` actors that the CPUs cannot hold; called before a new run's folder is made."""
    learner: Callable[[Any, TrainConfig, RunCallback], tuple[Learner, Callable[[], list[str]]]]
    """``(model, config, callback)``: the learner fed by the actors, and what to add to the run's notes once it has
    trained."""


def _learner(model: Any, config: TrainConfig, callback: RunCallback,
             worker_learner: WorkerLearner | None) -> tuple[Learner, Callable[[], list[str]]]:
    """``model.learn``, or with ``config.workers`` the learner fed by Ray actors; and what to add to the run's notes
    once it has trained."""
    if not config.workers:
        return model.learn, list
    return _worker_learner(config, worker_learner).learner(model, config, callback)


def _worker_learner(config: TrainConfig, worker_learner: WorkerLearner | None) -> WorkerLearner:
    if worker_learner is None:
        raise CLIError(f"this run collects with {config.workers} Ray workers: train it with `herl train`, or pass "
                       "worker_learner=herl.distributed.runs.WORKER_LEARNER")
    return worker_learner


def _eval_history(run_dir: Path) -> list[tuple[int, float | None, float]]:
    """The evaluations a resumed run already logged, from progress.csv."""
    rows = read_progress(run_dir / "progress.csv")
    history = []
    for row in rows:
        if row.get("eval/mean_reward") not in (None, ""):
            success = row.get("eval/success_rate")
            history.append((int(float(row["time/total_timesteps"])), float(success) if success else None,
                            float(row["eval/mean_reward"])))
    return history


def _summarize(run_dir: Path, config: TrainConfig, steps: int, wall_time: float,
               history: list[tuple[int, float | None, float]], notes: list[str] = ()) -> RunSummary:
    successes = [(step, s) for step, s, _ in history if s is not None]
    reached = [step for step, s in successes if s >= SUCCESS_THRESHOLD]
    return RunSummary(
        run_dir=str(run_dir), seed=config.seed, steps=steps, wall_time=round(wall_time, 2),
        final_success=successes[-1][1] if successes else None,
        best_success=max(s for _, s in successes) if successes else None,
        first_step_at_threshold=reached[0] if reached else None,
        final_mean_reward=history[-1][2] if history else None,
        notes=(*config.notes, *notes),
    )


def start_run(config: TrainConfig, run_dir: Path, *, progress: str = "auto", position: int = 0,
              on_eval: OnEval | None = None, worker_learner: WorkerLearner | None = None) -> RunSummary:
    """Train a new run of ``config`` in ``run_dir`` (created; it must not hold a run already); ``on_eval`` is called
    with each evaluation's results; a run with ``workers`` learns through ``worker_learner``."""
    run_dir = Path(run_dir)
    _refuse_batched(config.env)
    if config.workers:  # before the folder exists: a refused run must not leave one that blocks the next command
        _worker_learner(config, worker_learner).check(config.workers)
    with new_run_folder(run_dir), _claim(run_dir):  # checked under the lock: two commands cannot both start it
        if (run_dir / CONFIG_FILE).exists():
            raise CLIError(f"{run_dir} already holds a run: continue it with `herl train --resume "
                           f"{shlex.quote(str(run_dir))}`, or choose another --run-dir")
        return _start(config, run_dir, progress=progress, position=position, on_eval=on_eval,
                      worker_learner=worker_learner)


@contextlib.contextmanager
def new_run_folder(run_dir: Path) -> Iterator[None]:
    """``run_dir`` made for a new run. Should the run fail before it writes its config (a setting refused when the
    model is built), the folders made here are removed again, lock file included: no empty run is left to litter
    ``runs/`` or to block the corrected command's ``--run-dir``. A folder that was there before is left as it is."""
    made = [folder for folder in (run_dir, *run_dir.parents) if not folder.exists()]  # deepest first
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if made and not (run_dir / CONFIG_FILE).exists():
            with contextlib.suppress(OSError):
                if {entry.name for entry in run_dir.iterdir()} <= {LOCK_FILE}:
                    (run_dir / LOCK_FILE).unlink(missing_ok=True)
                for folder in made:
                    folder.rmdir()  # not empty (something else wrote there): stops, leaving it
        raise


def _refuse_batched(env_id: str) -> None:
    """Runs on batched envs are trained by :mod:`herl.run.batched` (``herl train`` sends them there): this module
    steps gymnasium envs, and cannot import that one, which builds on it."""
    from herl.batched.registry import is_batched_env

    if is_batched_env(env_id):
        raise CLIError(f"{env_id} is a batched env: its runs are trained by herl.run.batched.start_run and "
                       "resume_run (what `herl train` calls for it), not herl.run.train's")


@contextlib.contextmanager
def _run_settings(config: TrainConfig, threads: int | None = None) -> Iterator[None]:
    """The torch settings of a run: its thread count (``threads`` if given: a resumed session's own), and denormal
    floats flushed to zero from before torch starts its worker threads (they copy the setting when they start: see
    :func:`herl.utils.flush_denormals`, which puts the calling thread's setting back when the run ends; worker threads
    started during the run keep flushing)."""
    with flush_denormals():
        torch.set_num_threads(threads or config.threads)
        yield


def _start(config: TrainConfig, run_dir: Path, *, progress: str, position: int, on_eval: OnEval | None,
           worker_learner: WorkerLearner | None, threads: int | None = None) -> RunSummary:
    with _run_settings(config, threads):
        return _start_in(config, run_dir, progress=progress, position=position, on_eval=on_eval,
                         worker_learner=worker_learner)


def _start_in(config: TrainConfig, run_dir: Path, *, progress: str, position: int, on_eval: OnEval | None,
              worker_learner: WorkerLearner | None) -> RunSummary:
    from herl.run.demos import check_demos_env

    config = _record_scripted_demos(config, run_dir)
    env = make_training_env(config.env, dict(config.env_kwargs), config.n_envs, config.vector_env,
                            config.env_processes)
    try:
        demos_note = check_demos_env(config, env)  # before the buffer reads them: names the env settings that differ
        model = build_model(config, env)
    except BaseException:
        env.close()
        raise
    notes = list(config.notes) + ([demos_note] if demos_note and demos_note not in config.notes else [])
    resolved = resolved_config(config, model, notes, f"the run's steps, at least {MIN_BUFFER:,}")
    atomic_write_text(run_dir / CONFIG_FILE, json.dumps(resolved.to_json(), indent=1))
    try:
        return _train(model, resolved, run_dir, resume_step=None, wall_time_before=0.0, progress_mode=progress,
                      position=position, on_eval=on_eval, worker_learner=worker_learner)
    finally:
        env.close()


def resolved_config(config: TrainConfig, model: Any, notes: list[str], buffer_rule: str) -> TrainConfig:
    """``config`` as the run saves it: the model's resolved hyperparameters, and ``notes`` with what herl chose for
    the user (the buffer's size by ``buffer_rule``, the precision, a missing device), each printed."""
    notes = list(notes)
    if "buffer_size" not in config.hyperparameters:
        notes.append(f"{_chosen_buffer_note(model.config.buffer_size)} ({buffer_rule}; {type(model).__name__}'s "
                     f"default is {type(model.config)().buffer_size:,}): set buffer_size to choose it")
    if config.policy.precision == "auto":
        notes.append(_precision_note(model))
    if config.device != "auto" and torch.device(config.device).type != model.device.type:
        notes.append(f"device={config.device}, but it is not available here: training on the "
                     f"{model.device.type.upper()}")
    notes.extend(_short_run_notes(config, model))
    resolved = dataclasses.replace(config, hyperparameters=model.config.to_json(), notes=tuple(notes))
    for note in resolved.notes:
        print(f"herl train: note: {note}", file=sys.stderr, flush=True)
    return resolved


def _short_run_notes(config: TrainConfig, model: Any) -> list[str]:
    """What a run too short for its settings never does: update at all (``learning_starts``), or copy DQN's
    target network (``target_update_interval`` env steps; SB3's default 10,000 outlasts a short run)."""
    notes = []
    starts = model.config.learning_starts
    if starts >= config.timesteps:
        notes.append(f"learning_starts={starts:,} is not below timesteps={config.timesteps:,}: this run collects "
                     "and never updates; set learning_starts lower or train longer")
    interval = model.config.target_update_interval if config.algo == "dqn" else None  # SAC's counts updates
    if interval is not None and interval >= config.timesteps > starts:
        notes.append(f"target_update_interval={interval:,} env steps is not below timesteps={config.timesteps:,}: "
                     "DQN's target network is never copied in this run (its targets stay those of the first "
                     "weights); set target_update_interval lower or train longer")
    return notes


def _precision_note(model: Any) -> str:
    """What ``policy.precision = "auto"`` chose, and why: a run's speed differs ~2x between the two."""
    chosen = model.policy_config.precision
    if chosen == "bfloat16":
        return "policy.precision=auto chose bfloat16 (this machine multiplies in it natively)"
    if "bfloat16" not in model.precisions:
        return f"policy.precision=auto chose float32 ({type(model).__name__} runs in float32 only)"
    return ("policy.precision=auto chose float32: no native bfloat16 matmuls here (they need a CPU with AVX512-BF16 "
            "or AMX, or a CUDA GPU of compute capability 8.0+, where the hidden layers run 2-4x faster)")


def resume_run(run_dir: Path, *, timesteps: int | None = None, progress: str = "auto", position: int = 0,
               on_eval: OnEval | None = None, threads: int | None = None,
               worker_learner: WorkerLearner | None = None) -> RunSummary:
    """Continue the run in ``run_dir`` from its latest checkpoint (to ``timesteps`` if given; with ``threads`` torch
    threads this time if given, its config's otherwise; a run with ``workers`` learns through ``worker_learner``)."""
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    _refuse_batched(config.env)
    check_demos_exist(config, run_dir)
    with _claim(run_dir):
        remove_partial_checkpoints(run_dir)
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            return _start(restart_config(run_dir, config, timesteps), run_dir, progress=progress, position=position,
                          on_eval=on_eval, worker_learner=worker_learner, threads=threads)
        config, finished = resumed_config(run_dir, config, checkpoint.step, timesteps)
        if finished is not None:
            return finished
        with _run_settings(config, threads):  # this session's threads only: config.json keeps the run's own
            env = make_training_env(config.env, dict(config.env_kwargs), config.n_envs, config.vector_env,
                                    config.env_processes)
            try:
                model, wall_time, checkpoint = _load_usable_checkpoint(run_dir, checkpoint, env, config)
                return _train(model, config, run_dir, resume_step=checkpoint.step, wall_time_before=wall_time,
                              progress_mode=progress, position=position, on_eval=on_eval,
                              worker_learner=worker_learner)
            finally:
                env.close()


OUTGROWN_BUFFER = "the buffer keeps the"


def restart_config(run_dir: Path, config: TrainConfig, timesteps: int | None) -> TrainConfig:
    """A run stopped before its first checkpoint starts again from scratch (its seed makes the same run): its logs
    go, and ``config`` comes back with ``timesteps`` if given."""
    for stale in [*run_dir.glob("events.out.tfevents.*"), run_dir / "progress.csv"]:
        stale.unlink(missing_ok=True)
    return config if timesteps is None else dataclasses.replace(config, timesteps=timesteps)


def resumed_config(run_dir: Path, config: TrainConfig, step: int,
                   timesteps: int | None) -> tuple[TrainConfig, RunSummary | None]:
    """The config a run resumed at ``step`` continues with (``--timesteps`` given: extended to it, config.json
    rewritten, with a note where the buffer is now smaller than the run), and the run's summary if it has finished
    already (nothing to do)."""
    if timesteps is not None and timesteps != config.timesteps:
        if timesteps < step:
            raise CLIError(f"{run_dir} has trained {step:,} steps already, more than --timesteps {timesteps:,}: with "
                           f"--resume, --timesteps is the run's new total; give more than {step:,} to train it on")
        note = _outgrown_buffer_note(config, timesteps)
        notes = tuple(n for n in config.notes if not n.startswith(OUTGROWN_BUFFER)) + ((note,) if note else ())
        config = dataclasses.replace(config, timesteps=timesteps, notes=notes)
        if note:
            print(f"herl train: note: {note}", file=sys.stderr, flush=True)
        atomic_write_text(run_dir / CONFIG_FILE, json.dumps(config.to_json(), indent=1))
    summary_path = run_dir / SUMMARY_FILE
    if step >= config.timesteps and summary_path.exists():
        with contextlib.suppress(ValueError, TypeError, UnicodeDecodeError):  # a damaged one is written again
            saved = RunSummary(**json.loads(summary_path.read_text(encoding="utf-8")))
            print(f"herl train: {run_dir} finished at step {step:,} already: nothing to train (--timesteps N, a new "
                  f"total above {step:,}, trains it on)", file=sys.stderr, flush=True)
            return config, dataclasses.replace(saved, run_dir=str(run_dir))  # where it is now (moved or copied)
    return config, None


def _outgrown_buffer_note(config: TrainConfig, timesteps: int) -> str | None:
    """What a run extended past the buffer herl chose for its first length keeps (None when that is not the case):
    the buffer is not resized, so from its end on the newest transitions replace the oldest."""
    size = config.hyperparameters.get("buffer_size")
    chosen = bool(size) and any(note.startswith(_chosen_buffer_note(size)) for note in config.notes)
    fresh = _chosen_buffer_size(config.algo, timesteps)
    if not chosen or fresh <= size:
        return None
    return (f"{OUTGROWN_BUFFER} {size:,} transitions herl chose for the run's length when it started; past that many "
            f"the newest replace the oldest (a run started with --timesteps {timesteps} would hold {fresh:,}; "
            "--set buffer_size=N chooses it when a run starts)")


SCRIPTED = "scripted"
"""``--demos scripted[:N]``: N episodes (default 100) of herl's scripted expert, recorded into the run folder."""


def _record_scripted_demos(config: TrainConfig, run_dir: Path) -> TrainConfig:
    """For ``demos.path = "scripted[:N]"``: record the expert's episodes into ``run_dir/demos`` (env steps of their
    own, not counted in the run's timesteps) and point the config there, so that ``--resume`` reads them again."""
    if config.demos is None or config.demos.path.partition(":")[0] != SCRIPTED:
        return config
    from herl.run.demos import record

    count = config.demos.path.partition(":")[2] or "100"
    if not count.isdigit() or int(count) < 1:
        raise CLIError(f"--demos {config.demos.path}: say how many episodes, e.g. scripted:100")
    output = (run_dir / "demos").resolve()
    if not (output / "data" / "metadata.json").exists():
        line = record(config.env, SCRIPTED, episodes=int(count), output=output, seed=10_000 * (config.seed + 1),
                      env_kwargs=dict(config.env_kwargs), successful_only=False, device="cpu")
        print(f"herl train: scripted expert: {line}", file=sys.stderr, flush=True)
    note = (f"demonstrations: {count} episodes of herl's scripted expert in {output} (their env steps are not counted "
            "in the run's steps)")
    return dataclasses.replace(config, demos=dataclasses.replace(config.demos, path=str(output)),
                               notes=(*config.notes, note))


def check_demos_exist(config: TrainConfig, run_dir: Path) -> None:
    """A CLIError naming the dataset if the run learns from demonstrations that are no longer where it recorded them
    (rebuilding the model reads them again, even though the checkpoint's buffer holds a copy)."""
    if config.demos is None:
        return
    from herl.demos.dataset import DatasetError, find_data_path

    try:
        find_data_path(config.demos.path)
    except (DatasetError, ImportError) as err:
        raise CLIError(f"{run_dir} learns from the demonstrations at {config.demos.path}, which cannot be found "
                       f"({err}): put the dataset back there to resume") from None


def _load_usable_checkpoint(run_dir: Path, checkpoint: Any, env: Any, config: TrainConfig) -> tuple[Any, float, Any]:
    """Load ``checkpoint``; if it is damaged (a truncated or deleted file), the newest older one that loads, saying
    so."""
    return first_loadable_checkpoint(run_dir, checkpoint, lambda c: load_checkpoint(c, env, device=config.device))


def first_loadable_checkpoint(run_dir: Path, checkpoint: Any, load: Callable[[Any], tuple[Any, float]],
                              errors: tuple[type[BaseException], ...] = ()) -> tuple[Any, float, Any]:
    """``(*load(c), c)`` for ``checkpoint``, or where it fails (herl's errors, OSError, and ``errors``), for the
    newest older complete checkpoint that loads, saying which; a CLIError when none does."""
    from herl.errors import HerlError

    candidates = [checkpoint, *(c for c in complete_checkpoints(run_dir) if c.step < checkpoint.step)]
    problems = []
    for candidate in candidates:
        try:
            loaded, wall_time = load(candidate)
        except (HerlError, OSError, *errors) as err:
            problems.append(f"{candidate.path.name}: {err}")
            print(f"herl train: checkpoint {candidate.path} cannot be loaded ({err}); trying an older one",
                  file=sys.stderr, flush=True)
            continue
        if candidate is not checkpoint:
            print(f"herl train: resuming {run_dir} from {candidate.path.name} (step {candidate.step:,}), the newest "
                  "checkpoint that loads", file=sys.stderr, flush=True)
        return loaded, wall_time, candidate
    raise CLIError(f"no checkpoint of {run_dir} can be loaded:\n  " + "\n  ".join(problems)
                   + f"\n  Start the run again in another folder (its settings are in {run_dir / CONFIG_FILE})")


def run_parallel(jobs: list[tuple[Any, dict[str, Any]]], n_workers: int) -> list[RunSummary]:
    """Call each ``(function, kwargs)``: one after another, or in ``n_workers`` processes.

    In processes, SIGTERM and SIGINT sent to this (the parent) process are passed on to the workers, which write a
    checkpoint and stop as a single run does; runs not started yet are not started. Then :class:`Interrupted` says
    where each run resumes from (the workers of ``herl train --jobs`` never heard of a SIGTERM sent to it).
    """
    if n_workers <= 1 or len(jobs) == 1:
        summaries = []
        for fn, kwargs in jobs:
            try:
                summaries.append(fn(**kwargs))
            except Interrupted as stop:
                if len(jobs) == 1:
                    raise
                # one run stopped: say where each of the folder's runs resumes, those not reached yet included
                raise Interrupted(_where_runs_resume(stop.how, [kwargs["run_dir"] for _, kwargs in jobs]),
                                  how=stop.how) from None
        return summaries
    n_workers = min(n_workers, len(jobs))
    context = multiprocessing.get_context("spawn")  # fork after torch has started threads can deadlock
    # the handler outlives the pool: its shutdown, which waits for the workers to exit, is covered too
    with _ForwardSignals() as forward, \
            ProcessPoolExecutor(max_workers=n_workers, mp_context=context, initializer=_init_worker) as pool:
        futures = [pool.submit(_in_worker, fn, kwargs, i) for i, (fn, kwargs) in enumerate(jobs)]
        pending = futures
        while pending:  # waits in short slices: a signal handler runs between them
            pending = list(concurrent.futures.wait(pending, timeout=0.5).not_done)
            if forward.signal_name:
                for future in pending:
                    future.cancel()  # not started: leave it so
        errors = [f.exception() for f in futures if not f.cancelled()]
        broken = any(isinstance(e, BrokenProcessPool) for e in errors)
        if not forward.signal_name and not broken:
            forward.finished = True  # every run ended: a signal from now on has nothing to stop
            return [f.result() for f in futures]
    # the pool has shut down: every worker has exited (those of a broken pool were sent SIGTERM and wrote checkpoints)
    bug = next((e for e in errors if e is not None and not isinstance(e, (KeyboardInterrupt, BrokenProcessPool))),
               None)
    if bug is not None:
        raise bug
    how = f"stopped by {forward.signal_name}" if forward.signal_name else \
        "stopped: a worker process died (killed, or out of memory), and the others were stopped"
    raise Interrupted(_where_runs_resume(how, [kwargs["run_dir"] for _, kwargs in jobs]), how=how)


def _init_worker() -> None:
    """Start a ``--jobs`` worker process in its own process group, so that a terminal's Ctrl-C reaches only the parent,
    which passes it on once (a worker that got it twice, from both, would stop at once without a checkpoint); and until
    a run installs :class:`StopOnSignal`, remember a stop signal rather than die of it."""
    global _worker_stop_signals
    _worker_stop_signals = []
    herl_warnings_as_lines("train")
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, frame: _worker_stop_signals.append(signal.Signals(received).name))
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True, name="herl-parent-watch").start()


_worker_busy = False
"""In a ``--jobs`` worker: whether it is training a run (:func:`_in_worker`)."""


def _in_worker(fn: Callable[..., Any], kwargs: dict[str, Any], position: int) -> Any:
    global _worker_busy
    _worker_busy = True
    try:
        return fn(**kwargs, position=position)
    finally:
        _worker_busy = False


def _stop_when_orphaned(parent: int) -> None:
    """A worker whose ``herl train`` died without passing a signal on (kill -9, the OOM killer) stops as if sent
    SIGTERM: a run in progress writes its checkpoint and stops; then the process exits, where it would otherwise wait
    for work from a parent that is gone."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    while _worker_busy:
        time.sleep(0.2)
    os._exit(0)


class _ForwardSignals(_OnStopSignals):
    """While installed in the parent of ``--jobs`` workers, pass SIGTERM and SIGINT on to them (each signal once: the
    first asks for a checkpoint and a stop, a second for a stop at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.signal_name = ""
        self.finished = False

    @property
    def stopping(self) -> bool:
        return bool(self.signal_name)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.finished:  # every run has ended and written its files: exit as if it came a moment later
            return
        if not self.signal_name:
            self.signal_name = signal.Signals(signum).name
            print(f"\nherl train: {self.signal_name}: every run writes a checkpoint and stops (send it again to stop "
                  "at once)", file=sys.stderr, flush=True)
        for child in multiprocessing.active_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)


def _where_runs_resume(stopped: str, run_dirs: list[Path]) -> str:
    """The message of runs of several seeds ``stopped`` ("stopped by SIGTERM"): where each run resumes from, read
    from its folder (one not started yet starts when the folder is resumed: its seed is in the folder's plan)."""
    lines = []
    for run_dir in map(Path, run_dirs):
        checkpoint = latest_checkpoint(run_dir) if (run_dir / "checkpoints").is_dir() else None
        if (run_dir / SUMMARY_FILE).exists():
            where = "finished"
        elif checkpoint is not None:
            where = f"resumes from step {checkpoint.step:,}"
        else:
            where = "resumes from the start (no checkpoint yet)" if (run_dir / CONFIG_FILE).exists() else \
                "not started (it starts then)"
        lines.append(f"  {run_dir}: {where}")
    parents = {Path(run_dir).parent for run_dir in run_dirs}
    folder = parents.pop() if len(parents) == 1 else None
    how = f"`herl train --resume {shlex.quote(str(folder))}`" if folder else "`herl train --resume RUN_DIR` for each"
    return f"{stopped}; continue with {how}:\n" + "\n".join(lines)


def default_run_dir(env_id: str, algo: str) -> Path:
    """``runs/ENV_ALGO_TIME``, the env id's ``/`` and ``:`` (``herl/...``, ``module:EnvId``) written as ``_``: a colon
    is no part of a file name on Windows, and means a host to ``scp`` and ``rsync``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = env_id.replace("/", "_").replace(":", "_")
    return Path("runs") / f"{name}_{algo}_{stamp}"
