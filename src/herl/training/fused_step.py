"""The whole gradient step as one compiled function: ``compile=True`` on a CPU and on CUDA (there in CUDA graphs).

Compiling the loss alone (what ``compile=True`` does where this step cannot run: an optimizer other than Adam) leaves
the rest of the step eager: the autograd engine runs the compiled backward graph, then ``zero_grad``, the optimizer's
step and their Python. On a CPU core that fixed cost is most of a small network's update (SAC [64, 64] at batch 256:
~1 ms of ~2). Here the gradients come from ``torch.func.grad`` inside the compiled function, so the loss, its
gradients, the clipping an algorithm asks for and Adam's step are one graph: inductor fuses them into a few kernels,
called from one Python call, with no autograd engine and no ``.grad`` tensors; the target networks' Polyak averaging
follows in the same graph. On CUDA the function runs in
``"reduce-overhead"`` mode: one CUDA graph replayed per step, the parameters, Adam's state and the normalizer's
statistics updated in place at fixed addresses.

Adam's step is ``torch.optim.Adam``'s (``fused=True``): the same formula on the same state tensors
(``optimizer.state[p]``: ``step``, ``exp_avg``, ``exp_avg_sq``), so a model saves, loads and trains on eagerly or
compiled, either way. A parameter an algorithm leaves out of a step (TD3's actor between its delayed updates) keeps its
state, as an eager step that finds no gradient for it does.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn


GRAPHS_PER_MODEL = 8
"""Room each compiled model adds to Dynamo's limit of graphs per function (``recompile_limit``, 8 by default: one
model's worth). Every model's step is the same function to Dynamo (:meth:`FusedStep._step`, or an algorithm's
``_losses``), with a graph for each algorithm, network shape and batch size, and past the limit Dynamo runs the
function uncompiled: with the default alone, the ninth model of its own shape in a process (a sweep, a notebook, a test
suite) would train uncompiled without a word. The room grows with the models, so one model whose graph kept changing
still stops recompiling after about 8 tries."""

_models = itertools.count(1)


def compile_update(fn: Any, *, cuda: bool) -> Any:
    """``torch.compile`` for a model's update or acting (on CUDA in ``"reduce-overhead"`` mode: CUDA graphs), with
    :data:`GRAPHS_PER_MODEL` more room in Dynamo's limits; its first call goes through :func:`first_call`.

    On a CPU without inductor's size asserts: the Python that calls the kernels checks every input's sizes and
    strides again, ~70 calls a step for SAC, 3-4 % of its [64, 64] update, which Dynamo's guards already check
    (static shapes: a new size or stride compiles a new graph)."""
    config = torch._dynamo.config
    room = GRAPHS_PER_MODEL * next(_models)
    for names in (("recompile_limit", "cache_size_limit"),
                  ("accumulated_recompile_limit", "accumulated_cache_size_limit")):  # torch < 2.7 names them so
        name = next((n for n in names if hasattr(config, n)), None)
        if name is not None:
            setattr(config, name, max(getattr(config, name), room))
    if cuda:
        return torch.compile(fn, mode="reduce-overhead", dynamic=False)
    return torch.compile(fn, dynamic=False, options={"size_asserts": False})


def first_call(compiled: Any, *args: Any) -> Any:
    """A compiled update's first call, which compiles it: where Dynamo's limit is reached it raises (the caller warns
    and trains eagerly) rather than run the function uncompiled in silence (torch 2.6 and later; before, Dynamo has
    no such switch)."""
    if not hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
        return compiled(*args)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        return compiled(*args)


def fused_step_unsupported(model: Any) -> str | None:
    """Why ``model``'s update cannot run as one compiled function (then the loss alone is compiled), or None."""
    if model.device.type not in ("cpu", "cuda"):
        return f"the model is on {model.device}, where herl compiles the loss alone"
    optimizer = model.optimizers.get("optimizer")
    if type(optimizer) is not torch.optim.Adam:
        return f"its optimizer is {type(optimizer).__name__}, not Adam"
    first = optimizer.param_groups[0]
    for group in optimizer.param_groups:
        for key in ("weight_decay", "amsgrad", "maximize", "differentiable", "capturable"):
            if group.get(key):
                return f"its Adam has {key}={group[key]}"
        if any(torch.is_tensor(group[key]) for key in ("lr", "eps")) or any(torch.is_tensor(b) for b in group["betas"]):
            return "its Adam's settings are tensors"
        if (group["betas"], group["eps"]) != (first["betas"], first["eps"]):
            return "its parameter groups differ in more than their step sizes"
    named = {id(p) for p in model.nets.parameters()}
    if any(id(p) not in named for group in optimizer.param_groups for p in group["params"]):
        return "its optimizer trains a parameter outside model.policy"
    return None


class _Losses(nn.Module):
    """``model._losses`` as a module over ``model.policy``, for ``torch.func.functional_call``."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.nets = model.nets
        self._model = model  # a plain attribute: the model is no module

    def forward(self, batch: Any, inputs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        return self._model._losses(batch, inputs)


class FusedStep:
    """One update of ``model``: ``step(batch, inputs, targets)`` returns ``_losses``' info (after the parameters and
    the ``(target, source, tau)`` targets moved)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.losses = _Losses(model)
        self._names: dict[int, str] = {}
        self._lrs = torch.zeros(0, dtype=torch.float64, device=model.device)
        self._lr_values: tuple[float, ...] = ()
        self.cuda = model.device.type == "cuda"
        self.compiled = compile_update(self._step, cuda=self.cuda)

    def __call__(self, batch: Any, inputs: Any, targets: tuple[tuple[nn.Module, nn.Module, float], ...] = ()) -> dict[str, Any]:
        model = self.model
        optimizer = model.optimizers["optimizer"]
        groups = optimizer.param_groups
        lrs = tuple(group["lr"] for group in groups)
        if lrs != self._lr_values:  # written when a schedule changes them: a write per group costs more than the check
            if len(self._lrs) != len(groups):
                self._lrs = torch.zeros(len(groups), dtype=torch.float64, device=model.device)
            for i, lr in enumerate(lrs):
                self._lrs[i] = lr
            self._lr_values = lrs
        left_out = model._parameters_left_out(inputs)
        trained = [(i, p) for i, group in enumerate(groups) for p in group["params"]
                   if p.requires_grad and id(p) not in left_out]
        if any(id(p) not in self._names for _, p in trained):
            self._names = {id(p): name for name, p in self.losses.named_parameters()}
        states = [_adam_state(optimizer, p) for _, p in trained]
        if self.cuda:
            from torch._dynamo import mark_static_address

            for tensor in (self._lrs, *(p for _, p in trained), *(t for state in states for t in state.values()),
                           *model.encoder.buffers(),  # the normalizer's statistics too (``_take_in``)
                           *(t for target, _, _ in targets for t in (*target.parameters(), *target.buffers()))):
                mark_static_address(tensor, guard=False)  # updated in place: the memory the graphs replay
            torch.compiler.cudagraph_mark_step_begin()  # the graphs reuse their output memory: a new step begins
        with torch.no_grad():
            info = self.compiled(batch, inputs, tuple(self._names[id(p)] for _, p in trained), [p for _, p in trained],
                                 [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                                 [s["step"] for s in states], self._lrs, tuple(i for i, _ in trained),
                                 groups[0]["betas"], groups[0]["eps"], model._grad_clip_norm(), targets)
        return {k: v.clone() if self.cuda and torch.is_tensor(v) else v for k, v in info.items()}

    def _step(self, batch: Any, inputs: Any, names: tuple[str, ...], params: list[torch.Tensor],
              exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor],
              lrs: torch.Tensor, group_of: tuple[int, ...], betas: tuple[float, float], eps: float,
              clip: float | None, targets: tuple[tuple[nn.Module, nn.Module, float], ...]) -> dict[str, Any]:
        def loss(trainable: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
            return torch.func.functional_call(self.losses, trainable, (batch, inputs), strict=False)

        self.model._take_in(batch)  # a transform of the loss may not change its captured tensors: here, before it
        found, info = torch.func.grad(loss, has_aux=True)(dict(zip(names, params)))
        grads = [found[name] for name in names]
        if clip is not None:  # torch.nn.utils.clip_grad_norm_'s
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            grads = [g * (clip / (total + 1e-6)).clamp(max=1.0) for g in grads]
        beta1, beta2 = betas
        for param, grad, exp_avg, exp_avg_sq, step, group in zip(params, grads, exp_avgs, exp_avg_sqs, steps, group_of):
            step.add_(1)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            count = step.double()
            # the two bias corrections in one small tensor, which inductor computes once: written inline, they
            # joined the update's loop and were computed again for every vector of it (two double-precision
            # powers; about half of Adam's time on a CPU core at TQC's [256, 256])
            step_size, correction = torch.stack([lrs[group] / (1 - beta1 ** count), (1 - beta2 ** count).sqrt()]).float()
            param.sub_(step_size * exp_avg / (exp_avg_sq.sqrt() / correction + eps))
        # the target networks follow the updated parameters here, in the graph: run eagerly after the step, their
        # few small ops took ~70 us of a FetchReach env step (SAC [64, 64], one core)
        for target, source, tau in targets:
            self.model.soft_update(target, source, tau)
        return info


def _adam_state(optimizer: torch.optim.Adam, param: torch.Tensor) -> dict[str, torch.Tensor]:
    """``optimizer.state[param]``, made as Adam makes it at its first step when it is not there yet."""
    state = optimizer.state[param]
    if not state:
        fused = any(p is param for g in optimizer.param_groups if g.get("fused") for p in g["params"])
        state["step"] = torch.zeros((), dtype=torch.float32, device=param.device if fused else "cpu")
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state
