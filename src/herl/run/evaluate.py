"""``herl eval``: success rate, return and episode length of saved models, and a video where the env renders."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from herl.io.atomic import atomic_path, check_target
from herl.run.checkpoint import CHECKPOINTS, MODEL_FILE, latest_checkpoint
from herl.run.envs import endless_episode_guard, make_env
from herl.run.errors import CLIError, MissingExtraError
from herl.run.folders import CONFIG_FILE, find_seed_runs, read_config


@dataclass(frozen=True)
class ModelToEvaluate:
    name: str
    """How the table names it."""
    path: Path
    """The model file."""
    env: str | None
    """Env id from the run's config, if it came from a run folder."""
    env_kwargs: dict[str, Any]


@dataclass(frozen=True)
class EvalResult:
    name: str
    steps: int
    """Env steps the model was trained for."""
    episodes: int
    success_rate: float | None
    mean_return: float
    std_return: float
    mean_length: float

    @property
    def success_interval(self) -> tuple[float, float] | None:
        """95 % Wilson score interval of the success rate (None without success information)."""
        if self.success_rate is None:
            return None
        return wilson_interval(round(self.success_rate * self.episodes), self.episodes)


def wilson_interval(successes: int, episodes: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (Wilson 1927) of a success rate seen as ``successes`` of ``episodes``; z = 1.96 for
    95 %. Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or 1 successes in n. It says how
    far a figure of a few dozen episodes can be from the policy's true rate: 40 of 50 gives 0.67-0.89."""
    if episodes < 1 or not 0 <= successes <= episodes:
        raise ValueError(f"need 0 <= successes <= episodes and episodes >= 1, got {successes} of {episodes}")
    p, n = successes / episodes, episodes
    scale = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / scale
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return max(0.0, center - half), min(1.0, center + half)


def find_models(target: Path, *, left_out: list[str] | None = None) -> list[ModelToEvaluate]:
    """The models at ``target``: a model file (in a run folder or one of its checkpoints, the run's env settings with
    it), a checkpoint's folder, a run folder (its model.zip, else its latest checkpoint), or a folder of seed runs
    (each of them). Given ``left_out``, a folder of several runs leaves out those with no model yet (a
    sweep's trial that has not reached its first evaluation) and says why there, rather than failing; it fails when
    none has one."""
    target = Path(target)
    if target.is_dir() and (target / MODEL_FILE).is_file() and not (target / CONFIG_FILE).exists():
        target = target / MODEL_FILE  # a checkpoint's folder (RUN/checkpoints/step_N/)
    if target.is_file():
        run = _run_of_model(target)
        config = read_config(run) if run is not None else None
        return [ModelToEvaluate(str(target), target, config and config.env, dict(config.env_kwargs) if config else {})]
    if not target.exists():
        raise CLIError(f"no such model file or run folder: {target}")
    models, empty = [], []
    for run in find_seed_runs(target):
        config = read_config(run)
        path = run / MODEL_FILE
        if not path.exists():
            checkpoint = latest_checkpoint(run)
            if checkpoint is None:
                empty.append(f"{run} has neither {MODEL_FILE} nor a checkpoint yet: nothing to evaluate")
                continue
            path = checkpoint.model_path
        models.append(ModelToEvaluate(run.name if run != target else str(run), path, config.env, dict(config.env_kwargs)))
    if empty and (left_out is None or not models):
        raise CLIError(empty[0] + (f" (nor have the {len(empty) - 1} other runs there)" if len(empty) > 1 else ""))
    if left_out is not None:
        left_out += [f"{message}: left out" for message in empty]
    return models


def _run_of_model(path: Path) -> Path | None:
    """The run folder a model file belongs to: its own folder (RUN/model.zip), or the run of the checkpoint it is in
    (RUN/checkpoints/step_N/model.zip), whose env settings it was trained with; None for a file outside a run."""
    if (path.parent / CONFIG_FILE).exists():
        return path.parent
    run = path.parent.parent.parent
    return run if path.parent.parent.name == CHECKPOINTS and (run / CONFIG_FILE).exists() else None


def load_model(path: Path, device: str = "auto") -> Any:
    from herl.io.archive import ArchiveError
    from herl.training.base import OffPolicyAlgorithm

    try:
        return OffPolicyAlgorithm.load(path, device=device)
    except ArchiveError as err:
        raise CLIError(str(err)) from err


def evaluate(model: Any, env_id: str, env_kwargs: dict[str, Any], *, episodes: int, deterministic: bool, seed: int,
             name: str) -> EvalResult:
    from herl.training.evaluation import evaluate_policy

    env = make_env(env_id, env_kwargs)
    try:
        check_spaces_fit(model, env.observation_space, env.action_space, env_id, env_kwargs)
        rewards, lengths, successes = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=deterministic,
                                                      return_episode_rewards=True, return_success_rate=True, seed=seed,
                                                      callback=endless_episode_guard(env, env_id))
    finally:
        env.close()
    return EvalResult(name, model.num_timesteps, len(rewards), float(np.mean(successes)) if successes else None, float(np.mean(rewards)),
                      float(np.std(rewards)), float(np.mean(lengths)))


def check_spaces_fit(model: Any, observation_space: Any, action_space: Any, env_id: str,
                     env_kwargs: Mapping[str, Any] | None = None) -> None:
    """``CLIError`` unless ``model`` can act in an env of these spaces: the same action space, and observations of the
    same keys and shapes. Their dtypes and bounds may differ, so that a model trained on a batched env (float32
    observations, the goals' bounds) acts in its gymnasium twin (gymnasium-robotics' float64 and unbounded ones)."""
    if _layout(observation_space) != _layout(model.observation_space) or action_space != model.action_space:
        made = f" made with {', '.join(f'env.{k}={v!r}' for k, v in env_kwargs.items())}" if env_kwargs else ""
        fix = "pass the env and the env settings it was trained with (--env, --set env.NAME=VALUE)" if env_kwargs \
            else "pass the right --env"
        raise CLIError(f"the model was not trained on {env_id}{made}: its spaces differ from the env's (observation "
                       f"{model.observation_space} vs {observation_space}; action {model.action_space} vs "
                       f"{action_space}); {fix}")


def _layout(space: Any) -> Any:
    """What a model reads of an observation space: the keys of a ``Dict`` and each ``Box``'s shape; other spaces as
    they are."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {key: _layout(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Box):
        return ("Box", tuple(space.shape))
    return space


def record_video(model: Any, env_id: str, env_kwargs: dict[str, Any], path: Path, *, episodes: int,
                 deterministic: bool, seed: int) -> str:
    """Write ``episodes`` episodes to ``path`` (mp4 or gif); returns a line saying what was written or why not."""
    try:
        import imageio.v2 as imageio
    except ImportError:
        return f"no video: {MissingExtraError('writing videos', 'imageio', 'video')}"
    if path.suffix.lower() not in (".mp4", ".gif"):
        return f"no video: {path} should end in .mp4 or .gif"
    try:
        check_target(path)  # before the episodes are rendered
    except OSError as err:
        return f"no video: {err}"
    if "DISPLAY" not in os.environ:
        # MuJoCo's default GLFW backend needs a display; EGL renders headless on a GPU or Mesa.
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    try:
        env = make_env(env_id, env_kwargs, render_mode="rgb_array")
    except CLIError:
        raise
    except Exception as err:  # envs reject render_mode in many ways
        return f"no video: {env_id} cannot render rgb_array frames ({type(err).__name__}: {err})"
    frames = []
    try:
        check_spaces_fit(model, env.observation_space, env.action_space, env_id, env_kwargs)
        obs, _ = env.reset(seed=seed)
        for _ in range(episodes):
            frames.append(env.render())
            done = False
            while not done:
                action, _ = model.predict(obs, deterministic=deterministic)
                obs, _, terminated, truncated, _ = env.step(action)
                frames.append(env.render())
                done = terminated or truncated
            obs, _ = env.reset()
    except CLIError:
        raise
    except Exception as err:
        return (f"no video: rendering {env_id} failed ({type(err).__name__}: {err}); for MuJoCo envs without a "
                "display try MUJOCO_GL=egl or MUJOCO_GL=osmesa")
    finally:
        env.close()
    if not frames or frames[0] is None:
        return f"no video: {env_id} returned no frames from render()"
    fps = env.metadata.get("render_fps") or 30
    try:
        with atomic_path(path, suffix=True) as tmp:  # imageio picks its writer by the suffix
            if path.suffix.lower() == ".mp4":
                imageio.mimsave(tmp, frames, fps=fps, macro_block_size=1)
            else:
                imageio.mimsave(tmp, frames, duration=1000 / fps, loop=0)
    except OSError as err:  # a missing folder, a full disk: a file already there is left as it was
        return f"no video: cannot write {path} ({err})"
    except (ImportError, ValueError, RuntimeError) as err:
        import importlib.util

        if path.suffix.lower() == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
            return "no video: writing mp4 needs imageio-ffmpeg, which is not installed: pip install 'herl[video]', or write a .gif"
        reason = next(iter(str(err).strip().splitlines()), type(err).__name__)  # the first line, not imageio's plugin list
        return f"no video: cannot write {path} ({type(err).__name__}: {reason})"
    return f"video: {path} ({episodes} episode(s), {len(frames)} frames)"
