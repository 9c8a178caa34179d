"""Multilayer perceptrons, including an ensemble of identical MLPs evaluated as one network.

The networks here are small ([64, 64] is typical for goal tasks), so an update's time goes to
per-operation overhead (~5 µs an eager op on CPU), not to arithmetic. Twin critics are therefore
one :class:`EnsembleMLP`: weights shaped ``(n_members, in, out)`` and one batched matmul per layer,
instead of two networks and twice the operations.

Wider networks ([256]*3 and up, as the Fetch manipulation tasks need) are bound by their matmuls. Setting
``hidden_dtype = torch.bfloat16`` on a network runs its hidden-to-hidden layers in bfloat16 (2-4x faster
matmuls on CPUs with AVX512-BF16 or AMX, and on recent GPUs); the first layer (the observations) and the
last (Q-values, quantiles, action means) stay float32, as do the weights, gradients and optimizer state:
mixed precision, see :func:`set_precision`.

``layer_norm=True`` normalizes every hidden layer's pre-activations over its units, with a learned scale and
shift (Ba et al. 2016), in the order Stable-Baselines' ``LnMlpPolicy`` uses: linear, layer norm, activation.
Critics with layer norms are the usual companion of many updates per env step (the DroQ and BRO critics; mrl's
DDPG for Fetch uses them too): they keep the features' scale fixed while the targets move. On FetchPush with
herl's recipe they did not speed learning up (docs/benchmarks.md, FetchPush section 11).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from torch import nn

from herl.nn import gemm
from herl.nn.acting import ActingNetwork
from herl.nn.extractors import ReadsFeatures

PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16}
"""The ``precision`` policy setting: the dtype of the hidden-to-hidden matmuls (None: float32)."""
AUTO_PRECISION = "auto"
"""The ``precision`` setting that picks bfloat16 where this machine multiplies in it natively, else float32
(:func:`resolve_precision`)."""

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU,
               "silu": nn.SiLU, "mish": nn.Mish, "softplus": nn.Softplus, "sigmoid": nn.Sigmoid, "selu": nn.SELU,
               "relu6": nn.ReLU6}
"""Activations by the name files and --set give them: each a module with no arguments (SB3 users pass the class)."""


def activation_class(name_or_class: str | type[nn.Module]) -> type[nn.Module]:
    """``"relu"`` (or a module class such as ``nn.ReLU``) to the module class."""
    if isinstance(name_or_class, str):
        try:
            return ACTIVATIONS[name_or_class]
        except KeyError:
            raise ValueError(f"unknown activation {name_or_class!r}: use one of {sorted(ACTIVATIONS)}") from None
    return name_or_class


def _uniform_(tensor: torch.Tensor, fan_in: int, generator: torch.Generator | None) -> None:
    # nn.Linear's default initialization (kaiming_uniform with a=sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        tensor.uniform_(-bound, bound, generator=generator)


def _layer_norm(h: torch.Tensor, width: int, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Layer norm over the last axis (``width`` units: a Python int, so traced graphs keep it constant), then
    ``h * weight + bias`` (weights cast to ``h``'s dtype)."""
    h = nn.functional.layer_norm(h, (width,))
    return torch.addcmul(bias.to(h.dtype), h, weight.to(h.dtype))


def _activate(activation: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``activation(x)``, with a ReLU as :func:`~herl.nn.gemm.compilable_relu` (no boolean tensors when compiled)."""
    return gemm.compilable_relu(x) if isinstance(activation, nn.ReLU) else activation(x)


class MLP(ReadsFeatures, ActingNetwork, nn.Module):
    """``in_dim -> hidden... -> out_dim`` with an activation between layers (none after the last);
    ``layer_norm``: a layer norm before each hidden activation. DQN's Q-network is one (hence ``predict``, see
    :mod:`herl.nn.acting`)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int],
        *,
        activation: str | type[nn.Module] = "relu",
        generator: torch.Generator | None = None,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        dims = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for width in hidden) if layer_norm else None
        self.activation = activation_class(activation)()
        for layer in self.layers:
            _uniform_(layer.weight, layer.in_features, generator)
            _uniform_(layer.bias, layer.in_features, generator)
        self.hidden_dtype: torch.dtype | None = None  # see set_precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._modules.get("features_extractor") is not None:  # DQN's Q-network fed by an extractor
            x = self.features(x)
        *hidden, last = self.layers
        dtype = self.hidden_dtype if len(hidden) > 1 else None
        fuse_relu = self.norms is None and isinstance(self.activation, nn.ReLU)  # one pass for linear and ReLU
        for i, layer in enumerate(hidden):
            if i == 0 or dtype is None:
                x = gemm.addmm(layer.bias, x, layer.weight.t(), relu=fuse_relu)
            else:
                x = nn.functional.linear(x, layer.weight.to(dtype), layer.bias.to(dtype))
                x = gemm.compilable_relu(x) if fuse_relu else x
            if self.norms is not None:
                norm = self.norms[i]
                x = _layer_norm(x, norm.normalized_shape[0], norm.weight, norm.bias)
            if not fuse_relu:
                x = _activate(self.activation, x)
            if i == 0 and dtype is not None:
                x = x.to(dtype)
        return gemm.addmm(last.bias, x if dtype is None else x.float(), last.weight.t())


class EnsembleMLP(ReadsFeatures, nn.Module):
    """``n_members`` MLPs of the same shape on the same input, as batched matmuls (a features extractor, when one is
    attached, is applied by the algorithm before the actions join the input: see :meth:`features`).

    ``forward(x)`` takes ``(batch, in_dim)`` and returns ``(n_members, batch, out_dim)``. The first
    layer's weights of all members sit side by side in one ``(in_dim, n_members * out)`` matrix, so
    the shared input costs one ``addmm``; later layers are one ``baddbmm`` each.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int],
        *,
        n_members: int = 2,
        activation: str | type[nn.Module] = "relu",
        generator: torch.Generator | None = None,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.n_members = n_members
        self.dims = [in_dim, *hidden, out_dim]
        self.activation = activation_class(activation)()
        first = hidden[0] if hidden else out_dim  # no hidden layer (net_arch=[]): one linear map per member
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        # layer 0: (in, members * out); later layers: (members, in, out) with biases (members, 1, out)
        w0, b0 = torch.empty(in_dim, n_members * first), torch.empty(n_members * first)
        _uniform_(w0, in_dim, generator)
        _uniform_(b0, in_dim, generator)
        self.weights.append(nn.Parameter(w0))
        self.biases.append(nn.Parameter(b0))
        for a, b in zip(self.dims[1:-1], self.dims[2:]):
            w, bias = torch.empty(n_members, a, b), torch.empty(n_members, 1, b)
            _uniform_(w, a, generator)
            _uniform_(bias, a, generator)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(bias))
        # layer_norm: each member's scale and shift per hidden layer, (members, 1, width)
        self.norm_weights = nn.ParameterList(nn.Parameter(torch.ones(n_members, 1, w)) for w in hidden) if layer_norm else None
        self.norm_biases = nn.ParameterList(nn.Parameter(torch.zeros(n_members, 1, w)) for w in hidden) if layer_norm else None
        self.hidden_dtype: torch.dtype | None = None  # see set_precision

    def forward(self, x: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        """Outputs of every member, ``(n_members, batch, out_dim)``.

        ``detach_params``: use the weights as constants, so gradients flow to ``x`` only (the
        actor's loss goes through the critic without computing gradients for the critic).
        """
        weights, biases = list(self.weights), list(self.biases)
        norms = list(zip(self.norm_weights, self.norm_biases)) if self.norm_weights is not None else None
        if detach_params:
            weights, biases = [w.detach() for w in weights], [b.detach() for b in biases]
            norms = [(w.detach(), b.detach()) for w, b in norms] if norms is not None else None
        if len(weights) == 1:  # linear members (no hidden layer)
            return gemm.ensemble_input_layer(biases[0], x, weights[0], self.n_members, relu=False)
        fuse_relu = norms is None and isinstance(self.activation, nn.ReLU)  # one pass for linear and ReLU
        h = gemm.ensemble_input_layer(biases[0], x, weights[0], self.n_members, relu=fuse_relu)  # (members, batch, hidden)
        if norms is not None:
            h = _layer_norm(h, self.dims[1], *norms[0])
        if not fuse_relu:
            h = _activate(self.activation, h)
        dtype = self.hidden_dtype if len(weights) > 2 else None
        if dtype is not None:
            h = h.to(dtype)
            weights[1:-1] = [w.to(dtype) for w in weights[1:-1]]
            biases[1:-1] = [b.to(dtype) for b in biases[1:-1]]
        for i in range(1, len(weights) - 1):
            h = gemm.baddbmm(biases[i], h, weights[i], relu=fuse_relu)
            if norms is not None:
                h = _layer_norm(h, self.dims[i + 1], *norms[i])
            if not fuse_relu:
                h = _activate(self.activation, h)
        return gemm.baddbmm(biases[-1], h if dtype is None else h.float(), weights[-1])

    @torch.no_grad()
    def load_member_(self, member: int, mlp: MLP) -> None:
        """Copy a plain :class:`MLP` of the same shape into member ``member`` (for tests and conversions)."""
        width = self.dims[1]
        self.weights[0][:, member * width:(member + 1) * width] = mlp.layers[0].weight.T
        self.biases[0][member * width:(member + 1) * width] = mlp.layers[0].bias
        for i, layer in enumerate(mlp.layers[1:], start=1):
            self.weights[i][member] = layer.weight.T
            self.biases[i][member, 0] = layer.bias
        if (self.norm_weights is None) != (mlp.norms is None):
            raise ValueError("load_member_: one network has layer norms and the other does not")
        for i, norm in enumerate(mlp.norms or ()):
            self.norm_weights[i][member, 0] = norm.weight
            self.norm_biases[i][member, 0] = norm.bias


_ONEDNN_ISAS_WITHOUT_BFLOAT16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


def _onednn_capped_below_bfloat16() -> bool:
    """Whether the process caps oneDNN, which runs PyTorch's bfloat16 products on the CPU, below the instructions
    that make them fast (``ONEDNN_MAX_CPU_ISA=AVX2``, say): there bfloat16 is emulated whatever the chip has."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return cap.strip().upper() in _ONEDNN_ISAS_WITHOUT_BFLOAT16


def has_fast_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware: a CPU with AVX512-BF16 or AMX, a CUDA GPU of
    compute capability 8.0 (Ampere) or later. Elsewhere bfloat16 is emulated and gains nothing over float32."""
    device = torch.device(device)
    if device.type == "cpu":
        if _onednn_capped_below_bfloat16():
            return False
        # torch.cpu's checks are private API (torch 2.1+): absent ones count as no
        checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        try:
            return any(check() for check in checks if check is not None)
        except RuntimeError:  # pragma: no cover - a build without the checks' backend
            return False
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return False


def resolve_precision(precision: str, device: torch.device, supported: tuple[str, ...] = tuple(PRECISIONS)) -> str:
    """``precision`` with ``"auto"`` replaced: ``"bfloat16"`` where ``device`` has fast bfloat16 matmuls
    (:func:`has_fast_bfloat16`) and ``supported`` allows it, else ``"float32"``; any other value as it is."""
    if precision != AUTO_PRECISION:
        return precision
    return "bfloat16" if "bfloat16" in supported and has_fast_bfloat16(device) else "float32"


def set_precision(module: nn.Module, precision: str) -> None:
    """Run the hidden-to-hidden layers of every :class:`MLP` and :class:`EnsembleMLP` in ``module`` in
    ``precision`` (a key of :data:`PRECISIONS`). Parameters stay float32: only the matmuls' inputs are cast."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {sorted(PRECISIONS)}")
    for m in module.modules():
        if isinstance(m, (MLP, EnsembleMLP)):
            m.hidden_dtype = PRECISIONS[precision]
