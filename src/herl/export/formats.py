"""Writing a :class:`~herl.export.graph.PolicyGraph` as ONNX or TorchScript, and checking the ONNX file."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from herl.export.graph import PolicyGraph, example_inputs, input_specs, sample_observations

OUTPUT_NAME = "action"
ONNX_OPSET = 17


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
        torch.onnx.export(graph, example_inputs(model), str(path), input_names=names, output_names=[OUTPUT_NAME],
                          dynamic_axes=dynamic, opset_version=opset, dynamo=False)
    return path


def export_torchscript(model: Any, path: str | os.PathLike) -> Path:
    """Write ``model``'s deterministic policy to ``path`` as a TorchScript module (``torch.jit.load(path)``, then
    ``module(*entries)`` with the entries of :func:`~herl.export.input_specs` in order); returns the path."""
    path = Path(path)
    with _export_mode(model), warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning))
        traced = torch.jit.trace(PolicyGraph(model).eval(), example_inputs(model), check_trace=False)
        # weights as constants: a deployed policy computes no gradients
        torch.jit.save(torch.jit.freeze(traced), str(path))
    return path


def check_onnx(model: Any, path: str | os.PathLike, *, n_observations: int = 1000, seed: int = 0,
               atol: float = 1e-5) -> float:
    """Compare onnxruntime's actions for the ONNX file at ``path`` with ``model.predict(obs, deterministic=True)``
    on ``n_observations`` observations sampled from the model's observation space (in float32, as exported, for a
    model trained with ``precision="bfloat16"``); returns the largest absolute difference, and raises AssertionError when it exceeds ``atol`` (for Discrete actions, any difference)."""
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
    error = float(np.max(np.abs(onnx_actions.astype(np.float64) - herl_actions.astype(np.float64))))
    limit = 0.0 if np.issubdtype(herl_actions.dtype, np.integer) else atol
    if error > limit:
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
