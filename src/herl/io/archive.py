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

FORMAT = "herl"
META_NAME = "meta.json"
ARRAYS_NAME = "arrays.safetensors"


class ArchiveError(ValueError):
    """A file that is not a readable herl archive of the expected kind."""


def write_archive(path: str | os.PathLike, *, kind: str, version: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``meta`` (JSON-able) and ``arrays`` to ``path`` atomically; returns the path written."""
    from herl import __version__

    path = Path(path)
    header = {"format": FORMAT, "kind": kind, "format_version": version, "herl_version": __version__, **meta}
    tensors = save_arrays({name: np.ascontiguousarray(a) for name, a in arrays.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr(META_NAME, json.dumps(header, indent=1))
            archive.writestr(ARRAYS_NAME, tensors)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_archive(path: str | os.PathLike, *, kind: str, max_version: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read an archive written by :func:`write_archive`, checking it is a herl ``kind`` we can read."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if META_NAME not in names or ARRAYS_NAME not in names:
                raise ArchiveError(
                    f"{path} is a zip file but not a herl archive (it lacks {META_NAME} or {ARRAYS_NAME})"
                )
            header = json.loads(archive.read(META_NAME))
            tensor_bytes = archive.read(ARRAYS_NAME)
    except zipfile.BadZipFile as err:
        raise ArchiveError(f"{path} is not a herl {kind} file (not a zip archive, or a damaged one): {err}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArchiveError(f"{path}: its {META_NAME} is damaged ({err})") from err
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArchiveError(f"{path} is not a herl archive (its {META_NAME} does not say format 'herl')")
    if header.get("kind") != kind:
        raise ArchiveError(f"{path} holds a herl {header.get('kind')!r}, not a {kind!r}: load it with the matching class")
    version = header.get("format_version")
    if not isinstance(version, int) or version > max_version:
        raise ArchiveError(
            f"{path} has {kind} format version {version!r}; this herl reads up to {max_version}: upgrade herl"
        )
    try:
        arrays = load_arrays(tensor_bytes)
    except Exception as err:  # safetensors raises its own error types for damaged headers
        raise ArchiveError(f"{path}: its {ARRAYS_NAME} is damaged ({err})") from err
    return header, arrays


