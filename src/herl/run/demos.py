"""``herl record`` and ``herl export``: demonstrations from a scripted expert or a model, and models out of Python."""

from __future__ import annotations

import importlib.util
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gymnasium import spaces

from herl.run.errors import CLIError, MissingExtraError, output_file
from herl.run.evaluate import find_models, load_model
from herl.run.folders import run_folder_of


def record(env_id: str, policy: str, *, episodes: int, output: Path, seed: int, env_kwargs: dict[str, Any],
           successful_only: bool, device: str, settings_from: str = "") -> str:
    """Record ``episodes`` episodes of ``policy`` (``scripted`` or a model / run folder) on ``env_id`` into the Minari
    dataset folder ``output``; returns a line saying what was written.

    The env is made as a run's evaluation env is, from ``env_kwargs`` (:func:`~herl.run.envs.make_env`): with its
    action repeat and time feature, which the dataset's metadata names (``herl_env``), and without the training-only
    start distributions. ``settings_from`` says where ``env_kwargs`` came from, for the line."""
    from herl.demos import DatasetError, generate_expert_traj, scripted_expert
    from herl.demos.dataset import check_dataset_target
    from herl.run.envs import make_env, stop_endless_episodes

    if importlib.util.find_spec("minari") is None:
        raise MissingExtraError("writing demonstrations", "minari", "demos")
    try:
        check_dataset_target(output)  # before the episodes are recorded
    except DatasetError as err:
        raise CLIError(str(err)) from None
    if policy == "scripted":
        try:
            expert: Any = scripted_expert(env_id)
        except ValueError as err:
            raise CLIError(str(err)) from err
    else:
        models = find_models(Path(policy))
        if len(models) != 1:
            raise CLIError(f"{policy} holds {len(models)} models: pass one of them (a model file or one seed's folder)")
        expert = load_model(models[0].path, device)
    env = stop_endless_episodes(make_env(env_id, env_kwargs), env_id, "a recorded episode")
    try:
        if policy != "scripted" and (expert.observation_space != env.observation_space
                                     or expert.action_space != env.action_space):
            run = models[0]
            trained = ("" if run.env is None else f" (its run's: env {run.env}, " + (", ".join(
                f"env.{k}={_toml(v)}" for k, v in run.env_kwargs.items()) or "no env settings") + ")")
            raise CLIError(f"{policy} was trained on another env than {env_id} with "
                           f"{', '.join(f'env.{k}={_toml(v)}' for k, v in env_kwargs.items()) or 'no env settings'}: "
                           f"its observations are {_shapes(expert.observation_space)}, the env's "
                           f"{_shapes(env.observation_space)}; "
                           f"record with the --preset, --algo and --set it was trained with{trained}")
        demos = generate_expert_traj(expert, output, env, n_episodes=episodes, seed=seed,
                                     successful_only=successful_only)
    except (DatasetError, RuntimeError) as err:
        message = str(err)
        if "raise max_attempts" in message:  # the Python function's argument; the command runs 3 x --episodes
            message = message.replace("(raise max_attempts, or keep failures)",
                                      f"in {3 * episodes} tries, 3 x --episodes (record without --successful-only, "
                                      "or with a better policy)")
        raise CLIError(message) from err
    finally:
        env.close()
    success = "" if demos.successes is None else f", {demos.successes.mean():.2f} of them successful"
    settings = describe_env_settings(demos.env_settings or {})
    episodes = f"{demos.n_episodes} episode" + ("" if demos.n_episodes == 1 else "s")
    return (f"wrote {episodes} ({len(demos):,} steps{success}) to {output}, recorded through "
            f"{settings}" + (f" ({settings_from})" if settings_from else ""))


def _shapes(space: spaces.Space) -> str:
    if isinstance(space, spaces.Dict):
        return "{" + ", ".join(f"{key!r}: {_shapes(sub)}" for key, sub in space.spaces.items()) + "}"
    return str(getattr(space, "shape", space))


def describe_env_settings(settings: Mapping[str, Any]) -> str:
    """``env.action_repeat=3, env.time_feature=true``: the settings as ``--set`` takes them."""
    return ", ".join(f"env.{key}={_toml(value)}" for key, value in settings.items())


def _toml(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_demos_env(config: Any, env: Any) -> str | None:
    """Check that ``env``, the env a run of ``config`` trains on, is the env its demonstrations were recorded in:
    the same action repeat and time feature (:data:`~herl.demos.dataset.ENV_SETTINGS`). A CLIError names what
    differs and both ways out; for a dataset that does not say (one recorded by another tool), the observation
    spaces are compared, and an error names the likely causes. Returns a note for the run where the dataset does not
    say and the run repeats actions (nothing else can tell one step from several), else None."""
    from herl.demos.dataset import DatasetError, check_space_match, recorded_env
    from herl.demos.record import env_settings

    if config.demos is None:
        return None
    single = env.envs[0] if hasattr(env, "envs") else env
    ours = env_settings(single)
    path = config.demos.path
    try:
        recorded = recorded_env(path)
    except (DatasetError, ImportError):  # no dataset there (yet: scripted[:N]), or a damaged one: the buffer says so
        return None
    theirs = recorded.settings
    source = f" (preset {config.preset}, then --set)" if config.preset else ""
    again = f"record them again through the run's env: {_record_command(config, ours)}"
    if theirs is not None:
        differ = [key for key in ours if theirs[key] != ours[key]]
        if not differ:
            return None
        back = " ".join(f"--set env.{key}={_toml(theirs[key])}" for key in differ)
        recorded_with = describe_env_settings({key: theirs[key] for key in differ})
        raise CLIError(
            f"the demonstrations at {path} were recorded through {recorded_with}, but this run's env has "
            f"{describe_env_settings({key: ours[key] for key in differ})}{source}, so their steps and observations "
            f"would not be the run's: {again} (herl record takes the same --preset, --algo and --set as herl train), "
            f"or train on the env they were recorded in with {back}")
    who = "a dataset of another tool, or of herl before it wrote them"
    unknown = f"the dataset does not say which env wrappers it was recorded through ({who})"
    try:
        check_space_match(recorded.observation_space, single.observation_space, recorded.action_space,
                          single.action_space, hint="")
    except DatasetError as err:
        back = "--set env.NAME=VALUE"
        obs, data_obs = single.observation_space, recorded.observation_space
        if isinstance(obs, spaces.Dict) and isinstance(data_obs, spaces.Dict) and "observation" in obs.spaces \
                and "observation" in data_obs.spaces:
            extra = obs["observation"].shape[-1] - data_obs["observation"].shape[-1]
            if extra in (1, -1) and ours["time_feature"] == (extra == 1):
                back = f"--set env.time_feature={_toml(extra != 1)}"
        raise CLIError(
            f"--demos {path}: {err}; {unknown}. This run's env has {describe_env_settings(ours)}{source}: a time "
            f"feature (one more entry in 'observation') or an action repeat on one side only is the likely cause. "
            f"If so, {again}, or train on the env they were recorded in with {back}") from None
    if ours["action_repeat"] == 1:
        return None
    return (f"the demonstrations at {path} do not say which env wrappers they were recorded through ({who}); this "
            f"run's env has env.action_repeat={ours['action_repeat']}, so each of their steps is taken as one decision "
            f"of {ours['action_repeat']} env steps. If they were recorded at every env step, {again}, or train with "
            "--set env.action_repeat=1")


def _record_command(config: Any, settings: Mapping[str, Any]) -> str:
    """``herl record ...`` for demonstrations through the env of a run of ``config``, whose wrappers are
    ``settings``."""
    words = ["herl", "record", "--env", config.env, *_preset_flags(config)]
    words += [word for key, value in settings.items() for word in ("--set", f"env.{key}={_toml(value)}")]
    return " ".join(map(shlex.quote, [*words, "-o", "NEW_DIR"]))


def _preset_flags(config: Any) -> list[str]:
    """The flags that choose ``config``'s preset and algorithm in ``herl record``, where they are not the env's
    defaults."""
    from herl.run.presets import load_presets, preset_for_env

    default = preset_for_env(config.env)
    flags = []
    if config.preset is not None and (default is None or default.name != config.preset):
        flags += ["--preset", config.preset] if config.preset in load_presets() else ["--config", config.preset]
    preset = load_presets().get(config.preset) if config.preset else None
    if preset is None or preset.algo != config.algo:
        flags += ["--algo", config.algo]
    return flags


TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts")
"""The file names ``herl export`` writes TorchScript to without ``--format``; ``.onnx`` is ONNX's."""


def export(target: Path, output: Path, *, fmt: str | None, check: bool, device: str) -> str:
    """Export the model at ``target`` (a model file or a run folder) to ``output``; returns what was done.

    ``output`` is written only once complete (and, for ONNX with ``check``, once onnxruntime's actions equal
    ``predict``'s): a file already there is replaced then, or left as it was."""
    models = find_models(target)
    if len(models) != 1:
        raise CLIError(f"{target} holds {len(models)} seed runs: export one of them, e.g. {models[0].path.parent}")
    chosen = fmt
    fmt = fmt or ("torchscript" if output.suffix in TORCHSCRIPT_SUFFIXES else "onnx")
    source = models[0].path
    if output.resolve() == source.resolve() or (output.exists() and os.path.samefile(output, source)):
        suggestion = source.with_suffix(".pt" if fmt == "torchscript" else ".onnx")
        raise CLIError(f"-o {output} is the model being exported ({source}): the export would replace it; write it "
                       f"to another file, e.g. -o {shlex.quote(str(suggestion))}")
    run = run_folder_of(source)
    if run is not None and ((output.exists() and output.resolve().is_relative_to(run.resolve()))
                            or output.resolve().is_relative_to((run / "checkpoints").resolve())):
        raise CLIError(f"-o {output} is a file of the run folder {run}, or lies among its checkpoints, which herl "
                       "keeps and prunes: write the export elsewhere, or under a new name beside the run's files")
    output_file(output)
    if chosen is None and output.suffix != ".onnx" and output.suffix not in TORCHSCRIPT_SUFFIXES:
        raise CLIError(f"-o {output}: herl writes ONNX to a .onnx file and TorchScript to a "
                       f"{'/'.join(TORCHSCRIPT_SUFFIXES)} file; name the file so, or say which with --format onnx or "
                       "--format torchscript")
    if fmt == "onnx" and importlib.util.find_spec("onnx") is None:
        raise MissingExtraError("ONNX export", "onnx", "export")
    model = load_model(source, device)
    from herl.export import check_onnx, export_onnx, export_torchscript, input_specs
    from herl.io.atomic import atomic_path

    inputs = ", ".join(f"{s.name} {s.dtype}[batch, {', '.join(map(str, s.shape))}]".replace(", ]", "]")
                       for s in input_specs(model))
    try:
        if fmt == "torchscript":
            export_torchscript(model, output)
            return f"wrote {output} (TorchScript; inputs in order: {inputs})"
        line = f"wrote {output} (ONNX; inputs: {inputs}; output: action)"
        if check and importlib.util.find_spec("onnxruntime") is None:
            export_onnx(model, output)
            return line + "\nnot checked: onnxruntime is not installed (pip install 'herl[export]')"
        with atomic_path(output) as written:  # checked before it replaces a file at output
            export_onnx(model, written)
            if check:
                try:
                    error = check_onnx(model, written)
                except AssertionError as err:
                    raise CLIError(f"{output} was not written: {err} (--no-check writes it anyway)") from None
    except OSError as err:  # a full disk, no permission: nothing was written
        raise CLIError(f"cannot write {output} ({type(err).__name__}: {err}); a file already there is left as it "
                       "was") from None
    if check:
        line += f"\nchecked: onnxruntime's actions equal predict's on 1,000 observations (max abs error {error:.2g})"
        if model.policy_config.precision != "float32":  # the graph computes in float32, predict in the model's
            line += (f", computed in float32 as exported: this model's own predict runs its hidden layers in "
                     f"{model.policy_config.precision}, which rounds its actions by ~1e-3")
    return line
