"""gymnasium spaces to and from JSON, for files that must not be unpickled."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """Describe ``space`` as plain JSON types (Box, Discrete, MultiBinary, MultiDiscrete, Dict)."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": np.dtype(space.dtype).name}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    raise TypeError(f"cannot save a {type(space).__name__} space: herl saves Box, Discrete, MultiBinary, MultiDiscrete and Dict")


# Bounds on what a file may describe: a space is built before any check of the weights, and one that allocates (a
# Discrete with n = 10**12 becomes a Q-network output layer of that size) must be refused first.
MAX_ELEMENTS = 10**8
MAX_DISCRETE = 10**7
MAX_DICT_DEPTH = 8
DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "bool"})


def _float_array(values: Any, shape: tuple[int, ...]) -> np.ndarray:
    # json writes inf as Infinity, which Python's json reads back
    array = np.asarray(values, dtype=np.float64)
    if array.shape not in ((), shape) or np.isnan(array).any():
        raise ValueError(f"bounds of shape {array.shape} (or NaN) for a space of shape {shape}")
    return np.broadcast_to(array, shape)


def _count(value: Any, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} must be a whole number in [{low:,}, {high:,}], got {value!r}")
    return value


def _dtype(name: Any) -> np.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {sorted(DTYPES)}")
    return np.dtype(name)


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 8:
        raise ValueError(f"shape must be a list of at most 8 sizes, got {value!r}")
    shape = tuple(_count(n, "a shape's size", 0, MAX_ELEMENTS) for n in value)
    if int(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
        raise ValueError(f"shape {shape} has more than {MAX_ELEMENTS:,} elements")
    return shape


def space_from_json(data: dict[str, Any], *, _depth: int = 0) -> spaces.Space:
    """Inverse of :func:`space_to_json`. Raises ``ValueError`` (or ``TypeError``) naming what is wrong for a
    description that is damaged, mistyped or too large; the file readers turn it into an ``ArchiveError``."""
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "Box":
            dtype, shape = _dtype(data["dtype"]), _shape(data["shape"])
            low, high = _float_array(data["low"], shape), _float_array(data["high"], shape)
            if (low > high).any():
                raise ValueError("a low bound above its high bound")
            return spaces.Box(low=low.astype(dtype), high=high.astype(dtype), shape=shape, dtype=dtype)
        if kind == "Discrete":
            n = _count(data["n"], "Discrete n", 1, MAX_DISCRETE)
            start = data.get("start", 0)
            if type(start) is not int or abs(start) > 2**62:
                raise ValueError(f"Discrete start must be a whole number, got {start!r}")
            return spaces.Discrete(n, start=start)
        if kind == "MultiBinary":
            n = data["n"]
            shape = _shape(n if isinstance(n, list) else [n])
            return spaces.MultiBinary(list(shape) if isinstance(n, list) else shape[0])
        if kind == "MultiDiscrete":
            nvec = data["nvec"]
            array = np.asarray(nvec)
            if array.dtype.kind not in "iu" or array.size > MAX_ELEMENTS or array.ndim > 8 or (array < 1).any() \
                    or (array > MAX_DISCRETE).any():
                raise ValueError(f"MultiDiscrete nvec must hold whole numbers in [1, {MAX_DISCRETE:,}]")
            return spaces.MultiDiscrete(array, dtype=_dtype(data.get("dtype", "int64")))
        if kind == "Dict":
            entries = data["spaces"]
            if not isinstance(entries, dict) or not entries or _depth >= MAX_DICT_DEPTH:
                raise ValueError("a Dict space needs a non-empty mapping of spaces, nested at most "
                                 f"{MAX_DICT_DEPTH} deep")
            return spaces.Dict({str(k): space_from_json(v, _depth=_depth + 1) for k, v in entries.items()})
    except KeyError as err:
        raise ValueError(f"a {kind} space description lacks {err}") from None
    except (TypeError, OverflowError) as err:
        raise ValueError(f"a {kind} space description is mistyped ({err})") from None
    raise ValueError(f"unknown space description {kind!r} in the saved file")
