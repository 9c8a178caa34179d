"""Small helpers shared across herl."""

from __future__ import annotations

import torch


def get_device(device: torch.device | str = "auto") -> torch.device:
    """Resolve ``"auto"`` to CUDA when available, else CPU; pass anything else to torch.device."""
    from herl.errors import ConfigError

    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    allowed = "'auto', 'cpu', 'cuda', 'cuda:<index>' or another torch device this machine has"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError("", "device", device, allowed) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("", "device", device, allowed + " (CUDA is not available here: use 'cpu' or 'auto')")
    if resolved.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("", "device", device, allowed + " (MPS is not available here: use 'cpu' or 'auto')")
    return resolved
