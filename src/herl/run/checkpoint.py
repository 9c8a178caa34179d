"""Checkpoints that a run resumes from exactly, written so that a crash never leaves a broken one.

A checkpoint is a folder ``checkpoints/step_<N>/`` holding

- ``model.zip``: weights, optimizer states, normalizer statistics, the model's random generators and counters
  (:meth:`save` of the algorithm);
- ``replay_buffer.zip``: the buffer with its running episodes and its generator;
- ``state.zip``: the rest of the loop's state: the running episodes' returns, lengths and last observations, how
  each env's running episode came about (:class:`herl.run.envs.ReplayableEnv`), the exploration noise's generator,
  the episode statistics, the algorithm's scalar counters (DQN's last target update, ...), the run's wall time.

It is written into a temporary folder that is renamed into place when complete, and ``checkpoints/latest.json``
(replaced atomically after that) names the newest one: a process killed at any moment leaves the previous
checkpoint intact and named. Checkpoints are taken at the start of a rollout, after the previous rollout's
gradient steps, the one point where a new ``learn`` call continues exactly as the interrupted one would have.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from herl.errors import ArchiveError
from herl.io.archive import read_archive, write_archive
from herl.io.model import loop_arrays, saved_last_obs
from herl.io.atomic import atomic_folder, atomic_write, share_like_new_files  # noqa: F401 (herl.run.train's)
from herl.run.envs import ReplayMismatch, reset_envs, restore_envs, snapshot_envs

CHECKPOINTS = "checkpoints"
LATEST = "latest.json"
MODEL_FILE = "model.zip"
BUFFER_FILE = "replay_buffer.zip"
STATE_FILE = "state.zip"
STATE_KIND = "training_state"
STATE_VERSION = 1
# Scalars of the model that are configuration, not training state, so a checkpoint leaves them alone.
_NOT_STATE = frozenset({"verbose", "seed", "n_envs", "_custom_logger", "_mode_dependent", "compile_seconds"})


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    """The checkpoint's folder."""
    step: int
    """Env steps trained when it was taken."""

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_FILE


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename (:mod:`herl.io.atomic`)."""
    atomic_write(path, text)


def checkpoints_folder(run_dir: Path) -> Path:
    """``run_dir/checkpoints``, which herl writes, reads and prunes; refused when it is a symbolic link, so that a run
    folder from elsewhere cannot make a resume delete or write files outside it."""
    root = Path(run_dir) / CHECKPOINTS
    if root.is_symlink():
        from herl.run.errors import CLIError

        raise CLIError(f"{root} is a symbolic link: herl keeps a run's checkpoints inside its folder and never follows a "
                       f"link out of it (it deletes and writes there); move the checkpoints into {Path(run_dir)}")
    return root


_said: set[str] = set()
"""The unusable ``latest.json`` warnings this process gave (Python's own once-only filter forgets them whenever a
``warnings.catch_warnings`` block ends)."""


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The checkpoint ``latest.json`` names, or None when the run has none yet.

    A ``latest.json`` that is damaged, names something other than a checkpoint folder of this run (it never points
    outside it), or names one that is incomplete, is not trusted: the newest complete checkpoint is used instead, with a
    warning that says so.
    """
    root = checkpoints_folder(run_dir)
    pointer = root / LATEST
    if not pointer.exists():
        found = complete_checkpoints(run_dir)
        return found[0] if found else None
    try:
        data = json.loads(pointer.read_text(encoding="utf-8"))
        name, step = data["path"], data["step"]
        if not (isinstance(name, str) and type(step) is int and name == f"step_{step:012d}"):
            raise ValueError(f"it names {name!r} at step {step!r}")
        checkpoint = Checkpoint(root / name, step)
        if not _complete(checkpoint.path):
            raise ValueError(f"{name} is missing or incomplete")
        return checkpoint
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OSError) as err:
        found = complete_checkpoints(run_dir)
        instead = f"resuming from {found[0].path.name} instead" if found else "and there is no other checkpoint"
        message = f"{pointer} is not usable ({err}): {instead}"
        if message not in _said:  # a run's resume and its next checkpoint both look: said once
            _said.add(message)
            warnings.warn(message, stacklevel=2)
        return found[0] if found else None


def complete_checkpoints(run_dir: Path) -> list[Checkpoint]:
    """The checkpoint folders of ``run_dir`` that hold every file, newest first."""
    out = []
    for path in checkpoints_folder(run_dir).glob("step_*"):
        suffix = path.name[len("step_"):]
        if suffix.isdigit() and _complete(path):
            out.append(Checkpoint(path, int(suffix)))
    return sorted(out, key=lambda c: c.step, reverse=True)


BATCHED_TRAINER_FILE = "trainer.zip"
BATCHED_RUN_FILE = "run.json"
"""A batched run's checkpoint (:mod:`herl.run.batched`) holds ``model.zip``, the trainer's ``trainer.zip`` (buffer,
envs, counters) and ``run.json`` (the run's wall time) instead of the buffer and loop-state files."""


def _complete(path: Path) -> bool:
    if not path.is_dir() or path.is_symlink():
        return False
    return any(all((path / f).is_file() for f in files)
               for files in ((MODEL_FILE, BUFFER_FILE, STATE_FILE), (MODEL_FILE, BATCHED_TRAINER_FILE, BATCHED_RUN_FILE)))


def write_checkpoint(run_dir: Path, model: Any, env: Any, *, wall_time: float, keep: int = 2) -> Checkpoint:
    """Save everything a run needs to continue exactly; keep the ``keep`` newest checkpoints."""
    root = checkpoints_folder(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    step = model.num_timesteps
    latest = latest_checkpoint(run_dir)
    if latest is not None and latest.step == step:
        return latest
    final = root / f"step_{step:012d}"
    if final.exists():  # left by a process killed between its rename and latest.json: never named, so stale
        shutil.rmtree(final)
    with atomic_folder(final, prefix=".tmp-") as tmp:  # the prefix remove_partial_checkpoints looks for
        model.save(tmp / MODEL_FILE)
        model.save_replay_buffer(tmp / BUFFER_FILE)
        meta, arrays = _loop_state(model, env, wall_time)
        write_archive(tmp / STATE_FILE, kind=STATE_KIND, version=STATE_VERSION, meta=meta, arrays=arrays)
    atomic_write_text(root / LATEST, json.dumps({"step": step, "path": final.name}))
    _prune(root, keep)
    return Checkpoint(final, step)


def _prune(root: Path, keep: int) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def remove_partial_checkpoints(run_dir: Path) -> None:
    """Delete what a process killed while writing left behind: temporary checkpoint folders, and the temporary files
    of atomic writes (``.<name>.<random>.tmp``) in the run folder and its checkpoints. Call it holding the run's lock."""
    run_dir = Path(run_dir)
    root = checkpoints_folder(run_dir)
    for tmp in root.glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)
    for folder in (run_dir, root):
        for tmp in folder.glob(".*.tmp"):
            if tmp.is_file():
                tmp.unlink(missing_ok=True)


def _loop_scalars(model: Any, values: Mapping[str, Any]) -> dict[str, int | float | bool]:
    """The numbers of the training loop's state among ``values`` (counters, seeds drawn) that a checkpoint keeps: not
    a setting (verbose, ...), and not a hyperparameter, which the model file holds as given (SAC's
    ``target_entropy="auto"``, not the -2.0 it came to; checkpoints written before kept it and their value is
    skipped)."""
    settings = {field.name for field in dataclasses.fields(model.config)}
    return {k: v for k, v in values.items()
            if type(v) in (int, float, bool) and k not in _NOT_STATE and k not in settings}


def _loop_state(model: Any, env: Any, wall_time: float) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays = loop_arrays(model)
    env_meta = []
    for i, (record, actions) in enumerate(snapshot_envs(env)):
        env_meta.append(record)
        arrays[f"env/{i}/actions"] = actions
    noise = model.action_noise
    meta = {
        "step": model.num_timesteps,
        "wall_time": wall_time,
        "scalars": _loop_scalars(model, vars(model)),
        "envs": env_meta,
        "noise": None if noise is None else {
            "rng_state": noise.rng.bit_generator.state,
            "noise_prev": np.asarray(getattr(noise, "noise_prev", [])).tolist(),
        },
        "ep_info_buffer": list(model.ep_info_buffer),
        "ep_success_buffer": list(model.ep_success_buffer),
        "last_losses": model.last_losses(),
        # recorded and not yet logged (a stop at a rollout start comes before the row the previous updates began)
        "pending_log": {} if model.logger is None else model.logger.pending(),
    }
    goal_moved = getattr(model.replay_buffer, "goal_moved_history", None)
    if goal_moved is not None:  # diagnostics/goal_moved_episodes' window: a resumed run logs what this one would
        meta["goal_moved_history"] = goal_moved
    return meta, arrays


def load_checkpoint(checkpoint: Checkpoint, env: Any, *, device: str = "auto") -> tuple[Any, float]:
    """``(model, wall_time)``: the model of ``checkpoint`` on ``env``, ready for ``learn(..., reset_num_timesteps=False)``.

    ``env`` is a fresh training env (:func:`herl.run.envs.make_training_env`); its running episodes are replayed
    to the state they had when the checkpoint was taken.
    """
    from herl.training.base import OffPolicyAlgorithm

    meta, arrays = read_archive(checkpoint.path / STATE_FILE, kind=STATE_KIND, max_version=STATE_VERSION)
    model = OffPolicyAlgorithm.load(checkpoint.model_path, env=env, device=device)
    model.load_replay_buffer(checkpoint.path / BUFFER_FILE, truncate_last_traj=False)
    try:
        return _restore_loop_state(model, env, meta, arrays)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RuntimeError) as err:
        if isinstance(err, ArchiveError):
            raise
        raise ArchiveError(f"{checkpoint.path / STATE_FILE}: a damaged training state ({type(err).__name__}: {err})") \
            from err


def _restore_loop_state(model: Any, env: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[Any, float]:
    for key, value in _loop_scalars(model, meta["scalars"]).items():  # never settings such as verbose
        if type(getattr(model, key, None)) is type(value):
            object.__setattr__(model, key, value)  # a counter, never a hyperparameter change (set_hyperparameters)
    model.set_last_losses(meta.get("last_losses", {}))  # checkpoints written before kept none
    if meta.get("pending_log"):  # held until the resumed run's logger takes them (herl.run.train._train)
        from herl.training.logger import Logger

        model.logger = Logger()
        model.logger.take_pending(meta["pending_log"])
    maxlen = model.ep_info_buffer.maxlen
    model.ep_info_buffer = deque(meta["ep_info_buffer"], maxlen=maxlen)
    model.ep_success_buffer = deque(meta["ep_success_buffer"], maxlen=maxlen)
    if "goal_moved_history" in meta and hasattr(model.replay_buffer, "goal_moved_history"):  # older ones lack it
        model.replay_buffer.goal_moved_history = meta["goal_moved_history"]
    if meta["noise"] is not None and model.action_noise is not None:
        model.action_noise.rng.bit_generator.state = meta["noise"]["rng_state"]
        if hasattr(model.action_noise, "noise_prev"):
            model.action_noise.noise_prev = np.asarray(meta["noise"]["noise_prev"], dtype=np.float64)
    saved = saved_last_obs(arrays)
    try:
        observations = _stack(restore_envs(env, meta["envs"], [arrays[f"env/{i}/actions"]
                                                                for i in range(len(meta["envs"]))]))
        exact = all(np.array_equal(np.asarray(_get(observations, k)), v) for k, v in saved.items())
    except ReplayMismatch:
        exact = False
    model._ep_returns = arrays["loop/ep_returns"].copy()
    model._ep_lengths = arrays["loop/ep_lengths"].copy()
    if not exact:
        # pybullet (panda-gym), for one, keeps solver state across resets. A state that merely looks like the
        # saved one would glue two different trajectories into one stored episode: cut the running episodes
        # instead (stored as truncated) and start new ones.
        warnings.warn("replaying the running episodes did not reproduce the saved observations (the env is not "
                      "deterministic given its seed): they are cut short and new ones start, so training goes on "
                      "from here but not bit for bit as the interrupted run would have", stacklevel=2)
        if hasattr(model.replay_buffer, "truncate_last_trajectory"):
            model.replay_buffer.truncate_last_trajectory(warn=False)
        observations = _stack(reset_envs(env))
        model._ep_returns[:] = 0.0
        model._ep_lengths[:] = 0
        if model.action_noise is not None:
            model.action_noise.reset()
    model._last_obs = observations
    model._env_was_seeded = True
    return model, float(meta["wall_time"])


def _stack(observations: list[Any]) -> Any:
    if isinstance(observations[0], dict):
        return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in observations[0]}
    return np.stack([np.asarray(o) for o in observations])


def _get(obs: Any, key: str) -> Any:
    return obs[key] if isinstance(obs, dict) else obs
