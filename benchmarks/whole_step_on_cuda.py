"""For the benchmarks beside it: let chosen models compile their whole gradient step on CUDA as one function in CUDA
graphs (loss, gradients, clipping, Adam: ``herl.training.fused_step``), as ``compile=True`` does on a CPU, while
``compile=True`` on CUDA compiles the loss alone. ``choose(model)`` before the model's first update."""

from __future__ import annotations

from typing import Any

import herl.training.fused_step as fused_step

_declines = fused_step.fused_step_unsupported


def _unless_chosen(model: Any) -> str | None:
    reason = _declines(model)
    if reason and model.device.type == "cuda" and reason.startswith("the model is on") and \
            getattr(model, "_whole_step_on_cuda", False):
        return None
    return reason


fused_step.fused_step_unsupported = _unless_chosen


def choose(model: Any) -> Any:
    model._whole_step_on_cuda = True
    return model
