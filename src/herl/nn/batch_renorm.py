"""Batch renormalization (Ioffe 2017, arXiv:1702.03275) and the networks CrossQ builds from it.

CrossQ (Bhatt et al. 2024, arXiv:1902.05605) drops target networks and puts batch renormalization in front
of every linear layer of actor and critics. Batch renormalization is batch normalization that, after a
warm-up, normalizes with its running statistics, corrected towards the batch's by factors clipped to
``[1/r_max, r_max]`` (scale) and ``[-d_max, d_max]`` (shift): training then matches what evaluation
computes, and an unusual batch cannot throw the network off. In training mode the running statistics
follow the batch's with ``momentum``; in evaluation mode they alone are used and left unchanged.

The statistics are taken over the batch axis, the second to last: ``(batch, features)`` for one network,
``(members, batch, features)`` for an ensemble, whose members then each keep their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from herl.nn import gemm
from herl.nn.mlp import _uniform_, activation_class


class BatchRenorm(nn.Module):
    """Batch renormalization over the batch axis (``-2``) of ``(batch, features)`` or ``(members, batch, features)``.

    Args:
        num_features: size of the last axis.
        n_members: ``None`` for 2-D inputs; for an ensemble, the size of the leading axis (statistics per member).
        momentum: rate at which the running statistics follow the batch's.
        eps: added to variances.
        warmup_steps: training-mode calls that normalize with the batch's own statistics (plain batch norm)
            before the running statistics take over.
        r_max, d_max: bounds of the renormalization's scale and shift corrections (sb3-contrib's 3 and 5).
    """

    def __init__(self, num_features: int, *, n_members: int | None = None, momentum: float = 0.01, eps: float = 0.001,
                 warmup_steps: int = 100_000, r_max: float = 3.0, d_max: float = 5.0) -> None:
        super().__init__()
        shape = (1, num_features) if n_members is None else (n_members, 1, num_features)
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.momentum, self.eps, self.warmup_steps = float(momentum), float(eps), int(warmup_steps)
        self._steps: int | None = None  # the steps buffer as a Python int: no device sync per forward pass on CUDA
        self.r_max, self.d_max = float(r_max), float(d_max)

    def forward(self, x: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        # Written as a centring and one addcmul with per-feature scale and shift (the renormalization and the
        # affine map folded into them): few passes over the batch. torch.var/var_mean are avoided: on CPU they
        # took ~10x as long as the mean of squares here.
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        if not self.training:
            scale = weight * (self.running_var + self.eps).rsqrt()
            return torch.addcmul(bias - self.running_mean * scale, x, scale)
        n = x.shape[-2]
        mean = x.mean(dim=-2, keepdim=True)
        centered = x - mean
        var = centered.square().sum(dim=-2, keepdim=True) / max(n - 1, 1)  # unbiased, as torch.var
        inv_std = (var + self.eps).rsqrt()
        if self._steps is None:
            self._steps = int(self.steps)
        if self._steps >= self.warmup_steps:
            with torch.no_grad():
                running_inv_std = (self.running_var + self.eps).rsqrt()
                r = (running_inv_std / inv_std).clamp_(1.0 / self.r_max, self.r_max)  # batch std / running std
                d = ((mean - self.running_mean) * running_inv_std).clamp_(-self.d_max, self.d_max)
            # weight * (x_hat * r + d) + bias, x_hat = centered * inv_std
            out = torch.addcmul(torch.addcmul(bias, weight, d), centered, weight * r * inv_std)
        else:
            out = torch.addcmul(bias, centered, weight * inv_std)
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
            self.steps += 1
        self._steps += 1
        return out

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._steps = None  # read again from the loaded buffer


class RenormMLP(nn.Module):
    """``BatchRenorm -> Linear -> activation`` per hidden layer, then a last ``BatchRenorm -> Linear``
    (sb3-contrib's CrossQ actor trunk and critics), for ``(batch, in)`` inputs, or, with ``n_members``,
    an ensemble of such networks on the same input returning ``(members, batch, out)``."""

    def __init__(self, in_dim: int, out_dim: int, hidden: Sequence[int], *, n_members: int | None = None,
                 activation: str | type[nn.Module] = "relu", momentum: float = 0.01, eps: float = 0.001,
                 warmup_steps: int = 100_000, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.n_members = n_members
        dims = [in_dim, *hidden, out_dim]
        members = 1 if n_members is None else n_members
        self.norms = nn.ModuleList(
            BatchRenorm(a, n_members=n_members, momentum=momentum, eps=eps, warmup_steps=warmup_steps) for a in dims[:-1]
        )
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for a, b in zip(dims[:-1], dims[1:]):
            w, bias = torch.empty(members, a, b), torch.empty(members, 1, b)
            _uniform_(w, a, generator)
            _uniform_(bias, a, generator)
            if n_members is None:
                w, bias = w[0], bias[0]
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(bias))
        self.activation = activation_class(activation)()

    def forward(self, x: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        """``detach_params``: the weights (and normalization scales) as constants, gradients to ``x`` only."""
        if self.n_members is not None:
            x = x.expand(self.n_members, *x.shape)
        last = len(self.weights) - 1
        for i, (norm, w, b) in enumerate(zip(self.norms, self.weights, self.biases)):
            if detach_params:
                w, b = w.detach(), b.detach()
            x = norm(x, detach_params=detach_params)
            x = gemm.baddbmm(b, x, w) if self.n_members is not None else gemm.addmm(b, x, w)
            if i < last:
                x = self.activation(x)
        return x
