"""Where Ray runs: a local Ray started by herl (the default, sized with ``cpus``), or a cluster by address."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from herl.run.errors import CLIError, MissingExtraError

# How long to wait for a cluster's port before saying it cannot be reached (Ray's own retries take minutes).
CONNECT_TIMEOUT = 5.0


def require_ray(what: str) -> Any:
    """Import Ray, or say which extra installs it."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError(what, "ray", "ray") from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: int | None = None, *, what: str = "herl") -> Iterator[Any]:
    """Ray, connected for the duration of the block: the Ray already initialized in this process if any, else the
    cluster at ``address`` (``auto``, ``host:port`` or ``ray://host:port``), else a local Ray with ``cpus`` CPUs (all
    the machine's by default). A Ray started here is shut down at the end."""
    ray = require_ray(what)
    if ray.is_initialized():
        yield ray
        return
    if address not in (None, "auto"):
        check_reachable(address)
    try:
        if address is None:
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level="warning")
        else:
            ray.init(address=address, logging_level="warning")
    except ConnectionError as err:
        raise CLIError(f"cannot connect to the Ray cluster at {address!r} ({err}): {_FIX}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


_FIX = ("start one with `ray start --head` on its head node and pass the address it prints (--address HOST:PORT, or "
        "ray://HOST:10001 for Ray Client), or leave out --address to run on a local Ray on this machine")


def check_reachable(address: str) -> None:
    """Fail within seconds when nothing listens at ``address`` (Ray itself retries for minutes before failing)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise CLIError(f"--address takes auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as err:
        raise CLIError(f"cannot reach the Ray cluster at {address} ({err}): {_FIX}") from None
