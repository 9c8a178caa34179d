"""Writing a :class:`~herl.export.graph.PolicyGraph` as ONNX or TorchScript, and checking the ONNX file."""

from __future__ import annotations

import inspect
import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from herl.export.graph import PolicyGraph, example_inputs, input_specs, sample_observations
from herl.io.atomic import atomic_write

OUTPUT_NAME = "action"
ONNX_OPSET = 17
_TORCHSCRIPT_EXPORTER = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
"""``torch.onnx.export``'s choice of its TorchScript-based exporter, where torch has another (2.5 and later; before,
it is the only one and the keyword does not exist)."""


def export_onnx(model: Any, path: str | os.PathLike, *, opset: int = ONNX_OPSET) -> Path:
    """Write ``model``'s deterministic policy to ``path`` as one ONNX graph; returns the path.

    Inputs are named after the observation entries the networks read (see :func:`~herl.export.input_specs`),
    each ``(batch, *shape)`` in the space's dtype; the output ``action`` is ``(batch, *action_shape)`` in the
    env's bounds (``int64`` indices for a Discrete action space). Needs no ONNX package to write; reading it
    back needs ``onnxruntime`` (``pip install 'herl[export]'``).
    """
    path = Path(path)
    graph = PolicyGraph(model)
    names = [spec.name for spec in input_specs(model)]
    dynamic = {name: {0: "batch"} for name in [*names, OUTPUT_NAME]}
    with _export_mode(model), warnings.catch_warnings():
        # torch >= 2.9 prefers its dynamo exporter (which needs onnxscript); the TorchScript-based one exports
        # these small MLPs exactly and needs nothing beyond torch
        warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
        # into memory, then to disk through herl's atomic write: a failure (a full disk) leaves a file already at
        # ``path`` as it was
        graph_bytes = io.BytesIO()
        torch.onnx.export(graph, example_inputs(model), graph_bytes, input_names=names, output_names=[OUTPUT_NAME],
                          dynamic_axes=dynamic, opset_version=opset, **_TORCHSCRIPT_EXPORTER)
    return atomic_write(path, graph_bytes.getvalue())


def export_torchscript(model: Any, path: str | os.PathLike) -> Path:
    """Write ``model``'s deterministic policy to ``path`` as a TorchScript module (``torch.jit.load(path)``, then
    ``module(*entries)`` with the entries of :func:`~herl.export.input_specs` in order); returns the path."""
    path = Path(path)
    with _export_mode(model), warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning))
        traced = torch.jit.trace(PolicyGraph(model).eval(), example_inputs(model), check_trace=False)
        # weights as constants: a deployed policy computes no gradients. Saved into memory, not to the path: torch's
        # own file writer aborts the process when the disk fills (its error escapes a C++ destructor)
        module_bytes = io.BytesIO()
        torch.jit.save(torch.jit.freeze(traced), module_bytes)
    return atomic_write(path, module_bytes.getvalue())


def check_onnx(model: Any, path: str | os.PathLike, *, n_observations: int = 1000, seed: int = 0,
               atol: float = 1e-5) -> float:
    """Compare onnxruntime's actions for the ONNX file at ``path`` with ``model.predict(obs, deterministic=True)``
    on ``n_observations`` observations sampled from the model's observation space (in float32, as exported, for a
    model trained with ``precision="bfloat16"``); returns the largest absolute difference, and raises AssertionError
    when it exceeds ``atol`` (for Discrete actions, any difference) or is not a number: actions that are NaN or
    infinite (onnxruntime's, or predict's) fail."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError("checking an ONNX file needs onnxruntime: pip install 'herl[export]'") from err
    observations = sample_observations(model, n_observations, seed)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected_inputs = sorted(observations)
    got_inputs = sorted(i.name for i in session.get_inputs())
    if got_inputs != expected_inputs:
        raise AssertionError(f"{path} takes inputs {got_inputs}; this model reads {expected_inputs}: "
                             "was it exported from another model?")
    onnx_actions = session.run([OUTPUT_NAME], observations)[0]
    predict_obs = observations["obs"] if list(observations) == ["obs"] else observations
    with _export_mode(model):  # the float32 forward pass that was exported
        herl_actions, _ = model.predict(predict_obs, deterministic=True)
    if onnx_actions.shape != herl_actions.shape:
        raise AssertionError(f"ONNX actions have shape {onnx_actions.shape}, predict's {herl_actions.shape}")
    onnx64, herl64 = onnx_actions.astype(np.float64), herl_actions.astype(np.float64)
    finite = np.isfinite(onnx64).reshape(len(onnx64), -1).all(axis=1)
    if not finite.all():  # NaN compares False with any limit: refused by name
        cause = (" (so do predict's: the model's weights are not finite)" if not np.isfinite(herl64).all()
                 else ", predict's do not")
        raise AssertionError(f"onnxruntime's actions hold NaN or infinity for {np.count_nonzero(~finite)} of "
                             f"{n_observations} observations{cause}: the exported policy is not usable")
    error = float(np.max(np.abs(onnx64 - herl64)))
    limit = 0.0 if np.issubdtype(herl_actions.dtype, np.integer) else atol
    if not error <= limit:  # a NaN in predict's actions makes the difference NaN, which no limit allows
        raise AssertionError(f"ONNX actions differ from predict's by up to {error:.3g} (allowed {limit:g}) over "
                             f"{n_observations} observations")
    return error


class _export_mode:
    """The model's networks in evaluation mode and in float32 for the export, restored afterwards (a model
    trained with ``precision="bfloat16"`` keeps float32 weights; its exported graph computes in float32)."""

    def __init__(self, model: Any) -> None:
        self.nets = model.nets
        self.modes: dict[Any, bool] = {}
        self.dtypes: dict[Any, Any] = {}

    def __enter__(self) -> None:
        self.modes = {m: m.training for m in self.nets.modules()}
        self.dtypes = {m: m.hidden_dtype for m in self.nets.modules() if hasattr(m, "hidden_dtype")}
        self.nets.train(False)
        for module in self.dtypes:
            module.hidden_dtype = None

    def __exit__(self, *exc: Any) -> None:
        for module, mode in self.modes.items():
            module.train(mode)
        for module, dtype in self.dtypes.items():
            module.hidden_dtype = dtype
