"""Small helpers shared across herl."""

from __future__ import annotations

import torch


def get_device(device: torch.device | str = "auto") -> torch.device:
    """Resolve ``"auto"`` to CUDA when available, else CPU; pass anything else to torch.device."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
