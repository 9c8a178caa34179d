"""Every file herl writes is written here: into a temporary file in the target's folder, flushed to disk, then
renamed over the target. A crash, a full disk or an error in the writer at any moment leaves the previous file as it
was and no temporary file behind (a process killed outright leaves a ``.<name>.<random>.tmp``, which never has the
target's name; ``herl train`` removes those of its run folder on resume).

- :func:`atomic_write`: bytes or text;
- :func:`atomic_file`: a file object to write into (``np.savez``, ``csv.writer``, ``zipfile.ZipFile``);
- :func:`atomic_path`: a temporary path, for writers that only take a path (matplotlib, imageio); with ``suffix``
  its name ends like the target's, for writers that choose the format by it;
- :func:`atomic_folder`: a temporary folder, renamed to the target folder once filled (checkpoints, datasets).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def umask() -> int:
    """The process's umask (new files get ``0o666 & ~umask``)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def share_like_new_files(path: str | os.PathLike) -> None:
    """Give ``path`` (and what a folder holds, at any depth) the permissions a new file or folder gets: tempfile makes
    them private (0600, 0700), and a run folder or a dataset is for the people who read it too."""
    mask = umask()
    path = Path(path)
    for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
        if not item.is_symlink():
            os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


def fsync_folder(folder: str | os.PathLike) -> None:
    """Flush a folder's entries to disk (a rename in it survives a power cut, not only a crash); POSIX only, as
    folders cannot be opened for fsync on Windows."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike) -> None:
    """Flush every file under ``folder``, and the folders themselves, to disk (before a rename makes it the target)."""
    folder = Path(folder)
    for item in sorted(folder.rglob("*"), reverse=True):  # files before the folders that hold them
        if item.is_symlink():
            continue
        if item.is_dir():
            fsync_folder(item)
        else:
            fd = os.open(item, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_folder(folder)


def check_target(path: str | os.PathLike) -> None:
    """Refuse a target that cannot become a file before anything is written: an ``OSError`` whose message names the
    path and what is wrong (mkstemp's would name the temporary file)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a folder")
    if not path.parent.is_dir():
        if path.parent.exists():
            raise NotADirectoryError(f"cannot write {path}: {path.parent} is not a folder")
        raise FileNotFoundError(f"cannot write {path}: the folder {path.parent} does not exist")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: bool = False) -> Iterator[Path]:
    """A temporary file in ``path``'s folder to write; when the block ends without an error it gets a new file's
    permissions, is flushed to disk and renamed to ``path``. On an error it is removed and ``path`` is left as it was.

    ``suffix``: the temporary name ends with ``path``'s suffix (``.<name>.<random>.tmp.png``), for writers that choose
    the format by it.
    """
    path = Path(path)
    check_target(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + (path.suffix if suffix else ""),
                                dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode_of(path))  # mkstemp makes it private (0600)
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)  # on disk before the rename makes it the file (a power cut, not only a crash)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def _mode_of(path: Path) -> int:
    """The permissions the file written to ``path`` gets: those of the file it replaces (a private file stays
    private), else a new file's."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return 0o666 & ~umask()
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else 0o666 & ~umask()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None,
                newline: str | None = None) -> Iterator[IO[Any]]:
    """A file object open for writing (``mode`` ``"wb"`` or ``"w"``) whose contents become ``path`` when the block
    ends without an error (see :func:`atomic_path`); text is UTF-8 unless ``encoding`` says otherwise."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole new file: mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding, newline=newline) as f:
        yield f


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically; returns the path."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, prefix: str | None = None) -> Iterator[Path]:
    """A temporary folder beside ``path`` to fill; when the block ends without an error, what it holds is flushed to
    disk and gets new files' permissions, and it is renamed to ``path``, which must not exist or be an empty folder
    (the rename fails otherwise). On an error it is removed. ``prefix``: of its name (``.<name>.<random>.tmp`` by
    default), for code that finds the folders a killed process left."""
    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix=prefix or f".{path.name}.", suffix="" if prefix else ".tmp", dir=path.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        share_like_new_files(tmp)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_folder(path.parent)
