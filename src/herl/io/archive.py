"""One file format for everything herl saves: a zip holding ``meta.json`` and ``arrays.safetensors``.

Loading parses JSON and raw tensor bytes only, so opening a file from someone else never runs
code from it (pickle-based formats do). Writes go to a temporary file that replaces the target
only once complete, so a crash mid-save leaves the previous file intact. An open file object (SB3's
``save`` and ``load`` take them) is written with the finished archive in one write, and read in place.
"""

from __future__ import annotations


import io
import json
import os
import platform
import sys
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays

from herl.errors import ArchiveError
from herl.io.atomic import atomic_file

FORMAT = "herl"
META_NAME = "meta.json"
ARRAYS_NAME = "arrays.safetensors"




def is_stream(path: Any) -> bool:
    """Whether ``path`` is an open file object (``open(..., "rb")``, ``io.BytesIO``) rather than a file name."""
    return not isinstance(path, (str, bytes, os.PathLike)) and (hasattr(path, "read") or hasattr(path, "write"))


def describe(path: Any) -> str:
    """``path`` as messages name it: the path, or for a file object its name when it has one."""
    if not is_stream(path):
        return str(path)
    name = getattr(path, "name", None)
    return f"the file object {name}" if isinstance(name, str) else f"the {type(path).__name__} file object"


def system_info() -> dict[str, str]:
    """The versions a file records of the system that wrote it (SB3's ``print_system_info`` shows them on load)."""
    from herl import __version__

    info = {"herl": __version__, "python": platform.python_version(), "numpy": np.__version__, "os": platform.system()}
    torch = sys.modules.get("torch")  # herl's files are written by code that imported it; the archive layer needn't
    if torch is not None:
        info["torch"] = torch.__version__
    return info


def write_archive(path: str | os.PathLike | IO[bytes], *, kind: str, version: int, meta: dict[str, Any],
                  arrays: dict[str, np.ndarray]) -> Path | IO[bytes]:
    """Write ``meta`` (JSON-able) and ``arrays`` to ``path`` atomically; returns the path written.

    ``path`` may also be a file object open for binary writing (SB3's ``save`` takes one): the whole archive is built
    in memory and written to it with one ``write``, so an error while building it leaves the stream untouched (a
    stream cannot be renamed into place, so a crash during that write is the caller's to handle).
    """
    from herl import __version__

    header = {"format": FORMAT, "kind": kind, "format_version": version, "herl_version": __version__,
              "system_info": system_info(), **meta}
    # np.ascontiguousarray makes a 0-d array 1-d: a scalar (an optimizer's step, Adam's moments of a scalar parameter)
    # would come back shaped (1,), which CUDA's fused Adam refuses beside its 0-d parameter
    tensors = save_arrays({name: np.ascontiguousarray(a).reshape(np.shape(a)) for name, a in arrays.items()})
    if is_stream(path):
        return _write_stream(path, header, tensors)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # as SB3's save: a model's folder is made for it
    with atomic_file(path) as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(META_NAME, json.dumps(header, indent=1))
        archive.writestr(ARRAYS_NAME, tensors)
    return path


def _write_stream(stream: IO[bytes], header: dict[str, Any], tensors: bytes) -> IO[bytes]:
    if _text_mode(stream):
        raise TypeError(f"{describe(stream)} is open in text mode: herl files are binary, open it with "
                        "open(path, 'wb') (or pass the path itself)")
    if not hasattr(stream, "write") or not getattr(stream, "writable", lambda: True)():
        raise TypeError(f"{describe(stream)} cannot be written to: open it with open(path, 'wb'), or pass a path")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(META_NAME, json.dumps(header, indent=1))
        archive.writestr(ARRAYS_NAME, tensors)
    stream.write(buffer.getbuffer())
    if hasattr(stream, "flush"):
        stream.flush()
    return stream


# Limits checked before a member is read (a 300 KB file whose member inflated to 1.2 GB of memory). herl
# writes its archives uncompressed, so a member that inflates at all comes from elsewhere; the ratio leaves room for
# archives recompressed by other tools.
MAX_META_BYTES = 64 * 2**20
MAX_RATIO = 100
MAX_JSON_DEPTH = 64


def read_archive(path: str | os.PathLike | IO[bytes], *, kind: str,
                 max_version: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read an archive written by :func:`write_archive`, checking it is a herl ``kind`` we can read.

    Every failure is an :class:`~herl.errors.ArchiveError` that names the file and what is wrong with it. ``path``
    may also be a file object open for binary reading (SB3's ``load`` takes one): the zip reader seeks in it as it
    needs (one that cannot seek is read to its end first), so its position does not matter.
    """
    header, tensor_bytes = _read_members(path, kind, arrays=True)
    path = describe(path)
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


def read_header(path: str | os.PathLike | IO[bytes]) -> dict[str, Any]:
    """The ``meta.json`` of a herl archive, of whatever kind or version (what ``print_system_info`` shows); the
    same checks as :func:`read_archive` on the way, none of its kind or version."""
    header, _ = _read_members(path, "", arrays=False)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArchiveError(f"{describe(path)} is not a herl archive (its {META_NAME} does not say format 'herl')")
    if _depth(header) > MAX_JSON_DEPTH:
        raise ArchiveError(f"{describe(path)}: its {META_NAME} nests deeper than {MAX_JSON_DEPTH} levels: a damaged "
                           "file")
    return header


def _read_members(path: Any, kind: str, *, arrays: bool) -> tuple[Any, bytes | None]:
    """The parsed ``meta.json`` and (with ``arrays``) the raw ``arrays.safetensors`` of the archive at ``path``."""
    what = f"herl {kind} file" if kind else "herl file"
    if is_stream(path):
        source: Any = _readable(path)
    else:
        source = path = Path(path)
        if path.is_dir():
            raise ArchiveError(f"{path} is a folder, not a {what}: pass the .zip file (a run folder's model is "
                               f"{path / 'model.zip'}; `herl eval` takes run folders)")
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    name = describe(path)
    try:
        with zipfile.ZipFile(source) as archive:
            names = set(archive.namelist())
            if META_NAME not in names or ARRAYS_NAME not in names:
                raise ArchiveError(
                    f"{name} is a zip file but not a herl archive (it lacks {META_NAME} or {ARRAYS_NAME})"
                )
            for member in (META_NAME, ARRAYS_NAME):
                _check_member(name, archive.getinfo(member))
            meta_bytes = archive.read(META_NAME)
            tensor_bytes = archive.read(ARRAYS_NAME) if arrays else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError, ValueError) as err:
        # ValueError: zipfile's own, for offsets that point outside the data (a cut or damaged archive)
        if isinstance(err, (FileNotFoundError, ArchiveError)):
            raise
        raise ArchiveError(f"{name} is not a {what} (not a zip archive, or a damaged one): {err}") from err
    try:
        header = json.loads(meta_bytes)
    except (ValueError, RecursionError) as err:  # ValueError: bad JSON, bad UTF-8, or the number below
        if "integer string conversion" in str(err):  # Python's limit, whose message suggests raising it
            raise ArchiveError(f"{name}: its {META_NAME} is damaged (it holds a whole number of more than "
                               f"{sys.get_int_max_str_digits():,} digits)") from None
        raise ArchiveError(f"{name}: its {META_NAME} is damaged ({type(err).__name__}: {err})") from err
    return header, tensor_bytes


def _readable(stream: Any) -> IO[bytes]:
    """A binary file object the zip reader can seek in: ``stream`` itself, or its bytes when it cannot seek."""
    if _text_mode(stream):
        raise TypeError(f"{describe(stream)} is open in text mode: herl files are binary, open it with "
                        "open(path, 'rb') (or pass the path itself)")
    if not hasattr(stream, "read") or not getattr(stream, "readable", lambda: True)():
        raise TypeError(f"{describe(stream)} cannot be read from: open it with open(path, 'rb'), or pass a path")
    if getattr(stream, "seekable", lambda: False)():
        return stream
    return io.BytesIO(stream.read())


def _text_mode(stream: Any) -> bool:
    mode = getattr(stream, "mode", None)  # io.BytesIO has none; gzip's file objects have a number
    return isinstance(stream, io.TextIOBase) or (isinstance(mode, str) and "b" not in mode)


def generator_state(path: str | os.PathLike, meta: dict[str, Any], name: str = "rng_state") -> dict[str, Any]:
    """``meta[name]``, a NumPy generator state, once a scratch generator has taken it: a damaged one is an
    :class:`ArchiveError` naming the field, before anything is built from the file."""
    state = meta.get(name)
    try:
        np.random.default_rng().bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise ArchiveError(f"{path}: its random generator state ({name}) is missing or damaged "
                           f"({type(err).__name__}: {err})") from None
    return state


def _check_member(path: Path | str, info: zipfile.ZipInfo) -> None:
    """Refuse a member that is encrypted or whose inflated size is beyond the limits, before reading a byte of it."""
    if info.flag_bits & 0x1:  # zipfile would ask for a password (a RuntimeError); herl never encrypts
        raise ArchiveError(f"{path}: its {info.filename} is encrypted, which herl files never are: a damaged file, or "
                           "not one herl wrote")
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
