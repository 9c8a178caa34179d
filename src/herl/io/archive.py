"""One file format for everything herl saves: a zip holding ``meta.json`` and ``arrays.safetensors``.

Loading parses JSON and raw tensor bytes only, so opening a file from someone else never runs
code from it (pickle-based formats do). Writes go to a temporary file that replaces the target
only once complete, so a crash mid-save leaves the previous file intact.
"""

from __future__ import annotations


import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays

from herl.errors import ArchiveError

FORMAT = "herl"
META_NAME = "meta.json"
ARRAYS_NAME = "arrays.safetensors"




def write_archive(path: str | os.PathLike, *, kind: str, version: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``meta`` (JSON-able) and ``arrays`` to ``path`` atomically; returns the path written."""
    from herl import __version__

    path = Path(path)
    header = {"format": FORMAT, "kind": kind, "format_version": version, "herl_version": __version__, **meta}
    tensors = save_arrays({name: np.ascontiguousarray(a) for name, a in arrays.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
                archive.writestr(META_NAME, json.dumps(header, indent=1))
                archive.writestr(ARRAYS_NAME, tensors)
            if hasattr(os, "fchmod"):  # mkstemp makes it private (0600): give it a new file's permissions
                os.fchmod(raw.fileno(), 0o666 & ~_umask())
            raw.flush()
            os.fsync(raw.fileno())  # on disk before the rename makes it the file (a power cut, not only a crash)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# Limits checked before a member is read (issue 10: a 300 KB file whose member inflated to 1.2 GB of memory). herl
# writes its archives uncompressed, so a member that inflates at all comes from elsewhere; the ratio leaves room for
# archives recompressed by other tools.
MAX_META_BYTES = 64 * 2**20
MAX_RATIO = 100
MAX_JSON_DEPTH = 64


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_archive(path: str | os.PathLike, *, kind: str, max_version: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read an archive written by :func:`write_archive`, checking it is a herl ``kind`` we can read.

    Every failure is an :class:`~herl.errors.ArchiveError` that names the file and what is wrong with it.
    """
    path = Path(path)
    if path.is_dir():
        raise ArchiveError(f"{path} is a folder, not a herl {kind} file: pass the .zip file (a run folder's model is "
                           f"{path / 'model.zip'}; `herl eval` takes run folders)")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if META_NAME not in names or ARRAYS_NAME not in names:
                raise ArchiveError(
                    f"{path} is a zip file but not a herl archive (it lacks {META_NAME} or {ARRAYS_NAME})"
                )
            for name in (META_NAME, ARRAYS_NAME):
                _check_member(path, archive.getinfo(name))
            header = json.loads(archive.read(META_NAME))
            tensor_bytes = archive.read(ARRAYS_NAME)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ArchiveError(f"{path} is not a herl {kind} file (not a zip archive, or a damaged one): {err}") from err
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ArchiveError(f"{path}: its {META_NAME} is damaged ({type(err).__name__}: {err})") from err
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArchiveError(f"{path} is not a herl archive (its {META_NAME} does not say format 'herl')")
    if _depth(header) > MAX_JSON_DEPTH:
        raise ArchiveError(f"{path}: its {META_NAME} nests deeper than {MAX_JSON_DEPTH} levels: a damaged file")
    if header.get("kind") != kind:
        raise ArchiveError(f"{path} holds a herl {header.get('kind')!r}, not a {kind!r}: load it with the matching class")
    version = header.get("format_version")
    if type(version) is not int or not 1 <= version <= max_version:
        raise ArchiveError(
            f"{path} has {kind} format version {version!r}; this herl reads versions 1 to {max_version} (a whole "
            "number): upgrade herl, or the file is damaged"
        )
    try:
        arrays = load_arrays(tensor_bytes)
    except Exception as err:  # safetensors raises its own error types for damaged headers
        raise ArchiveError(f"{path}: its {ARRAYS_NAME} is damaged ({err})") from err
    return header, arrays


def generator_state(path: str | os.PathLike, meta: dict[str, Any], name: str = "rng_state") -> dict[str, Any]:
    """``meta[name]``, a NumPy generator state, once a scratch generator has taken it: a damaged one is an
    :class:`ArchiveError` naming the field, before anything is built from the file (issue 10)."""
    state = meta.get(name)
    try:
        np.random.default_rng().bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise ArchiveError(f"{path}: its random generator state ({name}) is missing or damaged "
                           f"({type(err).__name__}: {err})") from None
    return state


def _check_member(path: Path, info: zipfile.ZipInfo) -> None:
    """Refuse a member whose inflated size is beyond the limits, before reading a byte of it."""
    limit = MAX_META_BYTES if info.filename == META_NAME else None
    if limit is not None and info.file_size > limit:
        raise ArchiveError(f"{path}: its {info.filename} claims {info.file_size:,} bytes, more than the {limit:,} a "
                           "herl file holds: a damaged or hostile file")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_RATIO * max(info.compress_size, 1) + 2**20:
        raise ArchiveError(f"{path}: its {info.filename} would inflate from {info.compress_size:,} to "
                           f"{info.file_size:,} bytes (more than {MAX_RATIO}x): refused as a decompression bomb")


def _depth(value: Any, level: int = 0) -> int:
    """How deeply ``value`` nests (stops counting past the limit)."""
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level
