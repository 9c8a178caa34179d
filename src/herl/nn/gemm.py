"""The networks' float32 matrix products on the CPU, through oneDNN where PyTorch's own path is slow.

PyTorch multiplies float32 matrices on the CPU with MKL. On AMD processors MKL runs its AVX2 code even where the
chip has AVX-512, and oneDNN (shipped inside PyTorch for its bfloat16 and inference kernels) does not: on a 2-core
AMD EPYC whose AVX-512 units are full width, one thread, a 512x256 by 256x256 product took 585 µs through
``torch.mm`` and 270 µs through oneDNN, the rate JAX's XLA reaches on the same core (``benchmarks/matmul_rate.py``).
A SAC or TQC update with [256, 256] networks is mostly such products, so this is most of the gap between eager
PyTorch and a JAX library. Zen 4 (AMD family 25) runs each AVX-512 instruction as two 256-bit halves, so there
oneDNN's products are no faster than MKL's AVX2 ones (48 and 52 G multiply-adds/s, ``benchmarks/matmul_rate.py``)
and its path, called from Python, lost: an eager float32 TQC update at [256, 256] took 13.2 ms through it against
12.3 through PyTorch's.

:func:`addmm` and :func:`baddbmm` are ``torch.addmm`` and ``torch.baddbmm`` with an optional ReLU after them (oneDNN
applies it in the same pass). Their backward passes are oneDNN products too. Each takes oneDNN's path only for
float32 tensors on the CPU, and only where :func:`cpu_backend` says so; everything else (bfloat16, CUDA, gradients
of gradients) goes through PyTorch's own ops, with the same results to float rounding.

:func:`cpu_backend` is ``"onednn"`` on AMD processors with full-width AVX-512 (family 26, Zen 5, and later; the case
measured above) and ``"aten"`` elsewhere: Intel's MKL runs its AVX-512 code on Intel chips, on Zen 4 neither path
is faster, and on AVX2 chips both libraries run AVX2 code. :func:`set_cpu_backend` chooses for the process
(``"auto"`` restores the rule). The two paths round differently, so a run is bit-for-bit reproducible on one machine,
not across machines whose backends differ.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

BACKENDS = ("auto", "onednn", "aten")
_choice = "auto"


@functools.cache
def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's fused linear op (PyTorch 2.0+ CPU builds with MKLDNN)."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without the op
        return False


FULL_WIDTH_AVX512_AMD_FAMILY = 26
"""The first AMD processor family (Zen 5) whose AVX-512 units are 512 bits wide; Zen 4 (family 25) splits each
instruction in two halves, and there oneDNN's float32 products are no faster than MKL's."""


def amd_with_full_width_avx512(cpuinfo: str) -> bool:
    """Whether ``/proc/cpuinfo``'s text describes an AMD processor of family 26 (Zen 5) or later."""
    if "AuthenticAMD" not in cpuinfo:
        return False
    families = re.findall(r"^cpu family\s*:\s*(\d+)", cpuinfo, flags=re.MULTILINE)
    return bool(families) and min(int(f) for f in families) >= FULL_WIDTH_AVX512_AMD_FAMILY


@functools.cache
def _amd_with_full_width_avx512() -> bool:
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # pragma: no cover - torch < 2.1
        return False
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:  # not Linux: no vendor to read, keep PyTorch's path
        return False
    return capability.startswith("AVX512") and amd_with_full_width_avx512(cpuinfo)


def cpu_backend() -> str:
    """The float32 CPU matmul path in use: ``"onednn"`` or ``"aten"`` (see the module's docstring)."""
    if _choice == "auto":
        return "onednn" if onednn_available() and _amd_with_full_width_avx512() else "aten"
    return _choice


def set_cpu_backend(backend: str) -> None:
    """Choose the float32 CPU matmul path for this process: ``"onednn"``, ``"aten"`` or ``"auto"`` (the rule)."""
    global _choice
    if backend not in BACKENDS:
        raise ValueError(f"unknown CPU matmul backend {backend!r}: use one of {list(BACKENDS)}")
    if backend == "onednn" and not onednn_available():
        raise ValueError("this PyTorch build has no oneDNN linear op: use 'aten'")
    _choice = backend


def _exporting() -> bool:
    """Whether a tracer, an exporter or a compiler is recording the ops: they get PyTorch's standard ones (ONNX and
    TorchScript files must not depend on oneDNN's op, and compilers choose their own kernels)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


MIN_MULTIPLY_ADDS = 3_000_000
"""Products smaller than this (rows x inner x outer, per member) keep PyTorch's path: below it, calling oneDNN from
Python costs more than its faster kernel saves (forward and backward of a 2-member layer, one thread, PyTorch's time
over oneDNN's: 0.49x at 256x32x64, 0.88x at 512x64x64, 0.94x at 256x256x25, 1.17x at 256x128x128, 1.72x at
256x256x256; ``python benchmarks/matmul_rate.py --layers``)."""


def _choice_allows(rows: int, inner: int, outer: int, *tensors: torch.Tensor) -> bool:
    # a compiler or a tracer asked first: a compiler cannot trace the backend's query, a tracer records shapes as tensors
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or cpu_backend() != "onednn":
        return False
    if rows * inner * outer < MIN_MULTIPLY_ADDS:
        return False
    for t in tensors:
        if not t.is_cpu or t.dtype is not torch.float32:
            return False
    return not _exporting()


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) if it is row- or column-major without gaps, else a row-major copy: oneDNN multiplies other
    layouts (a row of a transposed batch, say) with a slow generic kernel, up to 1000x slower."""
    return t if t.is_contiguous() or t.t().is_contiguous() else t.contiguous()


def _mm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, relu: bool = False) -> torch.Tensor:
    """``a @ b (+ bias)(, ReLU)`` for 2-D ``a`` (m, k) and ``b`` (k, n), by oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(_dense(a), _dense(b.t()), bias, "relu" if relu else "none", [], "")


def _each(fn, *tensors: torch.Tensor) -> torch.Tensor:
    """``fn`` of 2-D tensors, or stacked over the members of 3-D ones (their first axis)."""
    if tensors[0].dim() == 2:
        return fn(*tensors)
    return torch.stack([fn(*(t[i] for t in tensors)) for i in range(tensors[0].shape[0])])


class _Linear(torch.autograd.Function):
    """``relu?(bias + x @ w)``, forward and backward by oneDNN: x ``(b, k)``, w ``(k, n)``, bias ``(n,)``; or per
    member, x ``(m, b, k)``, w ``(m, k, n)``, bias ``(m, 1, n)``."""

    @staticmethod
    def forward(ctx, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, relu: bool) -> torch.Tensor:
        out = _each(lambda xi, wi, bi: _mm(xi, wi, bi.reshape(-1), relu), x, w, bias)
        ctx.relu = relu
        ctx.save_for_backward(x, w, out if relu else None)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, w, out = ctx.saved_tensors
        if ctx.relu:
            grad = torch.ops.aten.threshold_backward(grad, out, 0)
        need_bias, need_x, need_w = ctx.needs_input_grad[:3]
        grad_bias = grad.sum(-2, keepdim=grad.dim() == 3) if need_bias else None
        grad_x = _each(lambda g, wi: _mm(g, wi.t()), grad, w) if need_x else None
        grad_w = _each(lambda xi, g: _mm(xi.t(), g), x, grad) if need_w else None
        return grad_bias, grad_x, grad_w, None


class _ReLUForCompilers(torch.autograd.Function):
    """ReLU whose backward pass multiplies by ``sign(out)``: the same gradient as ``torch.relu``'s, with no boolean
    tensor in the graph.

    Compiled, ``torch.relu``'s backward is ``where(out <= 0, 0, grad)``, and the generated code may keep the mask
    ``out <= 0`` from the forward pass as a tensor of bools (the compiled TQC and SAC updates did, for the critics'
    pass with their weights held). Inductor's CPU kernels (PyTorch 2.13, AVX-512) store and load such masks element
    by element: a ReLU with its mask over a (2, 256, 256) block took 2.7 ms compiled against 0.24 ms eager, and with
    the mask as floats 0.13 ms (one core). With this form the compiled SAC update at [64, 64] went from 1.1x the
    eager one's time to 0.65-0.71x (``python benchmarks/compiled_update.py --algo sac --net 64 64 --precision
    float32``)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:  # torch.func.grad's form
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return grad * torch.sign(out)


def compilable_relu(x: torch.Tensor) -> torch.Tensor:
    """``torch.relu(x)``; under a compiler, :class:`_ReLUForCompilers` (the same values and gradients)."""
    return _ReLUForCompilers.apply(x) if torch.compiler.is_compiling() else torch.relu(x)


def _bias_apart(x: torch.Tensor) -> bool:
    """Whether ``bias + x @ w`` is written as a product, then an add: compiled, on a CPU. There ``addmm`` and
    ``baddbmm`` copy the bias into their output before the library multiplies into it; apart, inductor adds the bias
    in the pointwise kernel that follows (the ReLU's, or the loss's). SAC's compiled step at [64, 64] (16 such
    products forward and backward): 1,226 against 1,267 us, one core; TQC's at [256, 256] unchanged."""
    return torch.compiler.is_compiling() and x.device.type == "cpu"


def addmm(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, *, relu: bool = False) -> torch.Tensor:
    """``bias + x @ w``, then ReLU if ``relu``: x ``(batch, k)``, w ``(k, n)``, bias ``(n,)``."""
    if _choice_allows(x.shape[0], *w.shape, bias, x, w):
        return _Linear.apply(bias.reshape(-1), x, w, relu)  # a (1, n) bias (RenormMLP's) as (n,)
    out = torch.mm(x, w) + bias if _bias_apart(x) else torch.addmm(bias, x, w)
    return compilable_relu(out) if relu else out


def baddbmm(bias: torch.Tensor, h: torch.Tensor, w: torch.Tensor, *, relu: bool = False) -> torch.Tensor:
    """``bias + h @ w`` per member, then ReLU if ``relu``: h ``(members, batch, k)``, w ``(members, k, n)``, bias
    ``(members, 1, n)``."""
    if _choice_allows(h.shape[1], *w.shape[1:], bias, h, w):
        return _Linear.apply(bias, h, w, relu)
    out = torch.bmm(h, w) + bias if _bias_apart(h) else torch.baddbmm(bias, h, w)
    return compilable_relu(out) if relu else out


def ensemble_input_layer(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, members: int, *,
                         relu: bool = False) -> torch.Tensor:
    """An ensemble's first layer on a shared input: ``(members, batch, hidden)`` from x ``(batch, k)``, the members'
    weights side by side in w ``(k, members * hidden)`` and bias ``(members * hidden,)``.

    PyTorch's path is one ``addmm`` for all members, then a transposed view; oneDNN's multiplies member by member,
    which leaves every later layer's input, and the gradients coming back, without a transposed copy.
    """
    k, hidden = w.shape[0], w.shape[1] // members
    if _choice_allows(x.shape[0], k, hidden, bias, x, w):
        w_members = w.view(k, members, hidden).transpose(0, 1)  # (members, k, hidden), a view
        return _Linear.apply(bias.view(members, 1, hidden), x.expand(members, *x.shape), w_members, relu)
    h = torch.mm(x, w) + bias if _bias_apart(x) else torch.addmm(bias, x, w)
    h = h.view(x.shape[0], members, -1).transpose(0, 1)
    return compilable_relu(h) if relu else h
