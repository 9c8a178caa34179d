"""``herl record`` and ``herl export``: demonstrations from a scripted expert or a model, and models out of Python."""

from __future__ import annotations

import importlib.util
import os
import shlex
from pathlib import Path
from typing import Any

from herl.run.errors import CLIError, MissingExtraError, output_file
from herl.run.evaluate import find_models, load_model


def record(env_id: str, policy: str, *, episodes: int, output: Path, seed: int, env_kwargs: dict[str, Any],
           successful_only: bool, device: str) -> str:
    """Record ``episodes`` episodes of ``policy`` (``scripted`` or a model / run folder) on ``env_id`` into the Minari
    dataset folder ``output``; returns a line saying what was written."""
    from herl.demos import DatasetError, generate_expert_traj, scripted_expert
    from herl.demos.dataset import check_dataset_target
    from herl.run.envs import make_env

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
    env = make_env(env_id, env_kwargs)
    try:
        demos = generate_expert_traj(expert, output, env, n_episodes=episodes, seed=seed,
                                     successful_only=successful_only)
    except (DatasetError, RuntimeError) as err:
        raise CLIError(str(err)) from err
    finally:
        env.close()
    success = "" if demos.successes is None else f", {demos.successes.mean():.2f} of them successful"
    return f"wrote {demos.n_episodes} episodes ({len(demos):,} steps{success}) to {output}"


def export(target: Path, output: Path, *, fmt: str | None, check: bool, device: str) -> str:
    """Export the model at ``target`` (a model file or a run folder) to ``output``; returns what was done.

    ``output`` is written only once complete (and, for ONNX with ``check``, once onnxruntime's actions equal
    ``predict``'s): a file already there is replaced then, or left as it was."""
    models = find_models(target)
    if len(models) != 1:
        raise CLIError(f"{target} holds {len(models)} seed runs: export one of them, e.g. {models[0].path.parent}")
    fmt = fmt or ("torchscript" if output.suffix in (".pt", ".pth", ".ts") else "onnx")
    source = models[0].path
    if output.resolve() == source.resolve() or (output.exists() and os.path.samefile(output, source)):
        suggestion = source.with_suffix(".pt" if fmt == "torchscript" else ".onnx")
        raise CLIError(f"-o {output} is the model being exported ({source}): the export would replace it; write it "
                       f"to another file, e.g. -o {shlex.quote(str(suggestion))}")
    output_file(output)
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
    return line
