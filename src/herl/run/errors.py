"""Errors the command line reports as one readable message, without a traceback."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herl.errors import HerlError


class CLIError(HerlError):
    """A mistake in what was asked (a flag, an env id, a file), with what to do about it.

    ``herl`` prints the message after ``herl: error:`` and exits with status 2; any other exception
    is a bug and keeps its traceback.
    """


class MissingExtraError(CLIError):
    """An optional dependency is not installed; the message names the extra that installs it."""

    def __init__(self, what: str, package: str, extra: str) -> None:
        super().__init__(f"{what} needs {package}, which is not installed: pip install 'herl[{extra}]'")
        self.what, self.package, self.extra = what, package, extra

    def __reduce__(self):  # so it crosses from a --jobs worker process intact
        return (type(self), (self.what, self.package, self.extra))


class WorkersLost(CLIError):
    """A ``--workers`` run lost an actor for good: its process died more often than Ray restarts it. ``herl train``
    writes a checkpoint and says how to resume."""


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal (SIGTERM, Ctrl-C); the message says where it resumes from, ``how`` how it stopped
    ("stopped by SIGTERM", "stopped at once"). ``herl`` prints it and exits with status 130."""

    def __init__(self, message: str = "", how: str = "stopped") -> None:
        super().__init__(message)
        self.how = how

    def __reduce__(self):  # so it crosses from a --jobs worker process intact
        return (type(self), (str(self), self.how))


def herl_warnings_as_lines(command: str) -> Callable[[], None]:
    """Show the warnings herl's own code gives as one line each, ``herl COMMAND: warning: message`` on stderr, as the
    command's other messages; a library's or an env's keep Python's form, which names where they come from. Only the
    text changes (``warnings.formatwarning``): filters and ``catch_warnings(record=True)`` see the same warnings.
    Returns the function that puts Python's form back."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    previous = warnings.formatwarning

    def text(message: Any, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
        if os.path.abspath(filename).startswith(package):
            return f"herl {command}: warning: {message}\n"
        return previous(message, category, filename, lineno, line)

    warnings.formatwarning = text

    def restore() -> None:
        warnings.formatwarning = previous

    return restore


def output_file(path: Path, flag: str = "-o") -> Path:
    """``path``, once it is clear that a file can be written there: its folder exists (the command line makes none
    without asking, as most tools) and it is not a folder itself; a :class:`CLIError` naming the problem otherwise."""
    from herl.io.atomic import check_target

    try:
        check_target(path)
    except FileNotFoundError as err:
        raise CLIError(f"{err}: create it first (mkdir -p {shlex.quote(str(path.parent))}) or choose another "
                       f"{flag}") from None
    except OSError as err:
        raise CLIError(f"{err}: give {flag} a file name in an existing folder") from None
    return path
