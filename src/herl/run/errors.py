"""Errors the command line reports as one readable message, without a traceback."""

from __future__ import annotations

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


class Interrupted(KeyboardInterrupt):
    """Training stopped by a signal (SIGTERM, Ctrl-C); the message says where it resumes from. ``herl`` prints it and
    exits with status 130."""
