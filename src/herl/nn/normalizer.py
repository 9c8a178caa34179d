"""Running mean/std normalization of network inputs (observations and goals).

HER's reference implementation (Andrychowicz et al. 2017, OpenAI baselines ``her/normalizer.py``)
normalizes observations and goals with running statistics, clipped to ``±clip_range``; without it
DDPG on the Fetch tasks learns far slower. Statistics are fed the *training batches*, whose
desired goals are mostly relabeled ones, so they describe the goals the networks actually see
(STYLE.md, HER pitfall 9).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Per-feature running mean and standard deviation, kept in float64 on the model's device.

    Args:
        size: number of features.
        clip_range: normalized values are clipped to ``[-clip_range, clip_range]``.
        eps: the standard deviation never goes below this (features that never vary pass through
            centred, not divided by ~0).
    """

    def __init__(self, size: int, *, clip_range: float = 5.0, eps: float = 0.01) -> None:
        super().__init__()
        self.clip_range = float(clip_range)
        self.eps = float(eps)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("total", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("total_sq", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("std", torch.ones(size))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Add the rows of ``x`` (``(batch, size)``) to the statistics."""
        x64 = x.to(torch.float64)
        self.count += x.shape[0]
        self.total += x64.sum(0)
        self.total_sq += x64.square().sum(0)
        mean = self.total / self.count
        var = (self.total_sq / self.count - mean.square()).clamp_(min=self.eps**2)
        self.mean.copy_(mean)
        self.std.copy_(var.sqrt_())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / self.std).clamp_(-self.clip_range, self.clip_range)
