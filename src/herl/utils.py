"""Small helpers shared across herl."""

from __future__ import annotations

import contextlib
import os
import sys
import time
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


def is_herls(cls: type) -> bool:
    """Whether ``cls`` is one of herl's own classes (not a user's subclass of one)."""
    return cls.__module__.split(".")[0] == "herl"


def loaded_class(name: str, base: type) -> type | None:
    """The subclass of ``base`` that ``name`` (``module:qualname``) names among the modules this process has already
    imported, or None. It never imports: a model file that names a class of the user's runs no code."""
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if found is not None and qualname else []:
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, base) else None


def available_cpus() -> int:
    """The CPU cores this process may run on: its affinity where the OS tells it, else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def busy_cores(interval: float = 0.25) -> float:
    """How many cores other work keeps busy right now: the machine's busy share over ``interval`` seconds, from
    /proc/stat (Linux), times its cores, less this process's own use; 0 where that cannot be read. The load average
    would lag a minute behind: a run started just after another would take its cores for busy ones."""
    def sample() -> tuple[int, int, float]:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        own = os.times()
        return values[3] + values[4], sum(values), own.user + own.system

    try:
        idle0, total0, own0 = sample()
        time.sleep(interval)
        idle1, total1, own1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    if total1 <= total0:
        return 0.0
    cores = os.cpu_count() or 1
    busy = (1.0 - (idle1 - idle0) / (total1 - total0)) * cores - (own1 - own0) / interval
    return max(0.0, busy)


def free_cores(cpus: int, busy: float) -> int:
    """The cores of ``cpus`` left for a run when other work keeps ``busy`` of them busy (one at least)."""
    return max(1, cpus - int(busy + 0.5))


_threads_checked = False


def warn_if_threads_wait(device: torch.device, stacklevel: int = 3) -> None:
    """Once a process, as it first trains on the CPU: warn when torch computes with more threads than the cores other
    work leaves free. Torch's threads wait for one another at every op, and one on a busy core waits for that core:
    a small network's update then takes many times as long (DQN's 25x, SAC's ~37x on a 2-core machine with one core
    busy). herl leaves the thread count to the user (results repeat bit for bit at a given count); ``herl train``
    chooses it from the free cores."""
    global _threads_checked
    if _threads_checked or device.type != "cpu" or torch.get_num_threads() == 1:
        return
    _threads_checked = True
    threads, cpus = torch.get_num_threads(), available_cpus()
    free = free_cores(cpus, busy_cores())
    if threads > free:
        warnings.warn(f"torch computes with {threads} threads, and other work leaves {free} of this machine's {cpus} "
                      "cores free: a thread on a busy core makes the others wait for it at every op, and small "
                      f"networks then train many times slower; call torch.set_num_threads({free}) before learn "
                      "(herl train chooses so itself)", RuntimeWarning, stacklevel=stacklevel)
