"""Where Ray runs: a local Ray started by herl (the default, sized with ``cpus``), or a cluster by address."""

from __future__ import annotations

import contextlib
import logging
import os
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
def ray_session(address: str | None = None, cpus: int | None = None, *, what: str = "herl",
                workers: int = 0) -> Iterator[Any]:
    """Ray, connected for the duration of the block: the Ray already initialized in this process if any, else the
    cluster at ``address`` (``auto``, ``host:port`` or ``ray://host:port``), else a local Ray with ``cpus`` CPUs (all
    the machine's by default). A Ray started here is shut down at the end.

    With ``workers``, Ray must have a CPU for each worker's actor: checked before a local Ray starts, and right after
    joining a cluster, so that a refused command has started nothing and written nothing."""
    ray = require_ray(what)
    if ray.is_initialized():
        check_worker_cpus(workers, ray.cluster_resources().get("CPU", 0))
        yield ray
        return
    if address is None:
        check_worker_cpus(workers, local_cpus(cpus))
    elif address != "auto":
        check_reachable(address)
    try:
        if address is None:
            _quiet_token_notice()
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level="warning")
        else:
            ray.init(address=address, logging_level="warning")
    except ConnectionError as err:
        raise CLIError(f"cannot connect to the Ray cluster at {address!r} ({err}): {_FIX}") from None
    try:
        if address is not None:
            check_worker_cpus(workers, ray.cluster_resources().get("CPU", 0))
        yield ray
    finally:
        ray.shutdown()


class _TokenNotice(logging.Filter):
    """Drops Ray's notice that token authentication is on, printed at every start of a local Ray whose RAY_AUTH_MODE is
    unset: the protection is what herl wants, and docs/scaling.md says it is on. Ray's other messages pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def _quiet_token_notice() -> None:
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(isinstance(f, _TokenNotice) for f in logger.filters):
        logger.addFilter(_TokenNotice())


def local_cpus(cpus: int | None = None) -> int:
    """The CPUs of the local Ray that :func:`ray_session` starts: ``cpus``, or Ray's own count of this machine's
    (which honours container limits)."""
    if cpus is not None:
        return cpus
    try:
        from ray._private.utils import get_num_cpus  # what ray.init(num_cpus=None) uses; private, hence the fallback
        return int(get_num_cpus())
    except (ImportError, AttributeError, TypeError, ValueError):
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_worker_cpus(workers: int, available: float) -> None:
    """Refuse more workers than Ray has CPUs for their actors (Ray would wait for the missing ones forever)."""
    if workers > available:
        raise CLIError(f"{workers} workers need {workers} CPUs for their actors, and Ray has {available:g}: use "
                       "fewer workers, or give Ray more CPUs (--cpus, or a cluster with --address)")


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
