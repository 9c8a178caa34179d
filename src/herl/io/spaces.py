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


def _float_array(values: Any) -> np.ndarray:
    # json writes inf as Infinity, which Python's json reads back; keep NaN out of bounds anyway
    return np.asarray(values, dtype=np.float64)


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """Inverse of :func:`space_to_json`."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low, high = _float_array(data["low"]), _float_array(data["high"])
        return spaces.Box(low=low.astype(dtype), high=high.astype(dtype), shape=tuple(data["shape"]), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=np.dtype(data.get("dtype", "int64")))
    if kind == "Dict":
        return spaces.Dict({k: space_from_json(v) for k, v in data["spaces"].items()})
    raise ValueError(f"unknown space description {kind!r} in the saved file")
