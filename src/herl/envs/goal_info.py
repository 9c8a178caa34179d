"""The ``info`` a goal env's ``compute_reward`` gets from HER with a batch of goals, and which of a step's info entries
HER can store for it. The buffers pass it; ``check_goal_env`` checks an env's reward with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NON_REWARD_INFO_KEYS = frozenset({"TimeLimit.truncated", "terminal_observation", "final_observation", "final_obs",
                                  "final_info", "episode", "_episode"})
"""Info entries that are book-keeping (of time limits, vector envs, Monitor), never a reward's input."""


class InfoBatch:
    """The ``info`` a goal function gets with a batch of goals. By entry, as a dict of arrays with one row per goal
    (``info["key"]``, ``info.get("key")``, ``keys()``, ``items()``, ``values()``, ``"key" in info``); by row, as
    Stable-Baselines3's array of per-row info dicts (``info[i]["key"]``, ``for row in info``, ``len(info)``), so an
    SB3 ``compute_reward`` runs unchanged. It is no ``dict``: a function that tells one step's info from a batch's
    by ``isinstance(info, dict)`` (as SB3 users write) sees a batch."""

    __slots__ = ("entries", "n_rows")

    def __init__(self, entries: dict[str, np.ndarray], n_rows: int) -> None:
        self.entries = entries
        self.n_rows = n_rows

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.entries[key]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not -self.n_rows <= key < self.n_rows:
                raise IndexError(f"info row {key} of {self.n_rows}")
            return {name: values[key] for name, values in self.entries.items()}
        raise TypeError(f"info takes an entry's name (info['key']: its rows) or a row's index (info[i]: its dict), "
                        f"got {key!r}")

    def __contains__(self, key: Any) -> bool:
        return key in self.entries

    def get(self, key: str, default: Any = None) -> Any:
        return self.entries.get(key, default)

    def keys(self):
        return self.entries.keys()

    def items(self):
        return self.entries.items()

    def values(self):
        return self.entries.values()

    def __iter__(self):  # over rows, as over SB3's array of dicts
        return (self[i] for i in range(self.n_rows))

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        return f"InfoBatch({self.entries!r}, n_rows={self.n_rows})"


def numeric_info_keys(infos: Any) -> list[str]:
    """Info entries a reward could use: numbers and numeric arrays, not book-keeping."""
    first = infos if isinstance(infos, Mapping) else (infos[0] if infos else {})
    keys = []
    for key, value in first.items():
        if key in NON_REWARD_INFO_KEYS or key.startswith("_"):
            continue
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            keys.append(key)
    return keys


def reduction_hint(goal_shape: tuple[int, ...]) -> str:
    """How to reduce a pair of goals of ``goal_shape`` (one goal, or a batch of them) to one value per pair: over the
    goal's own axes, counted from the end, so that the same code serves one pair and a batch."""
    if len(goal_shape) <= 1:
        return "np.linalg.norm(achieved_goal - desired_goal, axis=-1)"
    axes = tuple(range(-len(goal_shape), 0))
    if len(axes) == 2:
        return f"np.linalg.norm(achieved_goal - desired_goal, axis={axes}) (the goals have {len(axes)} axes)"
    return f"np.sqrt(((achieved_goal - desired_goal) ** 2).sum(axis={axes})) (the goals have {len(axes)} axes)"
