"""Typed batches returned by the buffers (field names as in Stable-Baselines3)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

TensorDict = dict[str, torch.Tensor]


class ReplayBufferSamples(NamedTuple):
    """A batch of transitions with flat observations; rewards and dones shaped (batch, 1)."""

    observations: torch.Tensor
    actions: torch.Tensor
    next_observations: torch.Tensor
    dones: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    """Prioritized replay: importance-sampling weights in (0, 1], shaped (batch, 1)."""
    indexes: np.ndarray | None = None
    """Prioritized replay: the stored slots, for ``update_priorities``."""


class DictReplayBufferSamples(NamedTuple):
    """A batch of transitions with dict observations; ``dones`` are terminations only (truncations bootstrap)."""

    observations: TensorDict
    actions: torch.Tensor
    next_observations: TensorDict
    dones: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    indexes: np.ndarray | None = None
    demo_mask: torch.Tensor | None = None
    """With demonstrations in the buffer: which rows (bool, shaped (batch,)) come from them."""
