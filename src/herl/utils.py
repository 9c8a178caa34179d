"""Small helpers shared across herl."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import torch


def get_device(device: torch.device | str = "auto", stacklevel: int = 3) -> torch.device:
    """Resolve ``"auto"`` to CUDA when available, else CPU; pass anything else to torch.device.

    As Stable-Baselines3, a CUDA (or MPS) device on a machine without one falls back to the CPU, so that a script
    written on a GPU machine runs on a laptop; unlike it, herl says so with a warning. A name torch does not know,
    or a CUDA index past the machine's devices, is an error. ``stacklevel`` points the warning at the caller's caller
    (the warnings module's meaning): raise it by one for each herl frame between the user's line and this call.
    """
    from herl.errors import ConfigError

    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    allowed = "'auto', 'cpu', 'cuda', 'cuda:<index>' or another torch device this machine has"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError("", "device", device, allowed) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"device={str(device)!r}, but CUDA is not available here: using the CPU (pass device='auto' to "
                      "pick CUDA where there is one without this warning)", UserWarning, stacklevel=stacklevel)
        return torch.device("cpu")
    if resolved.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        warnings.warn(f"device={str(device)!r}, but MPS is not available here: using the CPU", UserWarning,
                      stacklevel=stacklevel)
        return torch.device("cpu")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ConfigError("", "device", device, f"{allowed} (this machine has {torch.cuda.device_count()} CUDA "
                          f"device(s): cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return resolved


def denormals_flushed() -> bool:
    """Whether this thread's CPU arithmetic flushes denormal floats (below ~1.2e-38) to zero."""
    return torch.tensor([1e-39]).mul(2.0).item() == 0.0


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush denormal floats to zero in this thread while the block runs (``torch.set_flush_denormal``), then put
    the setting back as it was.

    Training makes denormals: Adam's first moment of a weight whose gradient stays zero (a unit that no sample
    activates) decays by 0.9 an update, into the denormal range within ~800 updates, and a CPU computes with
    denormals at a fraction of its speed. On FetchPush with the ``fetch_push`` preset, Adam's step took 7.6 ms
    of a 33 ms update without this and 0.8 ms with it (docs/benchmarks.md). Values that small are zero to every
    loss and weight here. Torch's worker threads copy the setting when they start, so with several torch threads it
    reaches them only when set before the first multi-threaded operation: ``herl train`` sets it at its start.
    """
    before = denormals_flushed()
    if not before:
        torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if not before:
            torch.set_flush_denormal(False)


def loaded_class(name: str, base: type) -> type | None:
    """The subclass of ``base`` that ``name`` (``module:qualname``) names among the modules this process has already
    imported, or None. It never imports: a model file that names a class of the user's runs no code."""
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if found is not None and qualname else []:
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, base) else None
