"""Presets: settings that train an env family well, one TOML file each in ``herl/presets/``, shipped with the package.

A preset file holds ``description``, ``envs`` (the ids it applies to, as shell patterns such as ``FetchReach-v*``),
``algo`` (the algorithm ``herl train`` uses without ``--algo``), settings shared by every algorithm (top-level keys
and the tables ``[env]``, ``[her]``, ``[eval]``, ``[checkpoint]``, ``[policy]``, ``[noise]``), and a table
``[algos.NAME]`` per algorithm with its hyperparameters (and its own ``[algos.NAME.policy]`` etc.). Keys are the
dotted keys of :mod:`herl.run.config`, so anything a preset sets, ``--set`` can change.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from herl.run.config import ALGOS, SECTIONS, tomllib
from herl.run.errors import CLIError

_HEADER_KEYS = ("description", "envs", "algo", "algos")


@dataclass(frozen=True)
class Preset:
    """One preset file, its settings flattened to dotted keys."""

    name: str
    """The file's name without ``.toml`` (what ``--preset`` takes)."""
    description: str
    """One line for ``herl list``."""
    envs: tuple[str, ...]
    """Env id patterns it applies to."""
    algo: str
    """Default algorithm."""
    common: dict[str, Any]
    """Settings for every algorithm."""
    per_algo: dict[str, dict[str, Any]]
    """Settings for one algorithm, by algorithm."""

    def matches(self, env_id: str) -> bool:
        bare_id = env_id.rpartition(":")[2]  # module:EnvId
        return any(fnmatch.fnmatchcase(bare_id, pattern) for pattern in self.envs)

    def layers(self, algo: str) -> list[tuple[str, dict[str, Any]]]:
        """The preset's settings for ``algo``, as config layers."""
        source = f"preset {self.name!r}"
        return [(source, self.common), (f"{source} [algos.{algo}]", self.per_algo.get(algo, {}))]


def _flatten(table: dict[str, Any], source: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if key not in (*SECTIONS, "env"):
                raise CLIError(f"{source}: unknown table [{key}]; tables are {', '.join([*SECTIONS, 'env'])}")
            flat.update({f"{key}.{name}": v for name, v in value.items()})
        else:
            flat[key] = value
    return flat


def parse_preset(name: str, text: str) -> Preset:
    source = f"preset file {name}.toml"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CLIError(f"{source} is not valid TOML: {err}") from err
    algo = data.get("algo")
    if algo not in ALGOS:
        raise CLIError(f"{source}: algo must be one of {', '.join(ALGOS)}, got {algo!r}")
    per_algo = data.get("algos", {})
    unknown = sorted(set(per_algo) - set(ALGOS))
    if unknown:
        raise CLIError(f"{source}: unknown [algos.*] table(s) {unknown}; use {', '.join(ALGOS)}")
    return Preset(
        name=name, description=str(data.get("description", "")), envs=tuple(data.get("envs", ())), algo=algo,
        common=_flatten({k: v for k, v in data.items() if k not in _HEADER_KEYS}, source),
        per_algo={a: _flatten(table, f"{source} [algos.{a}]") for a, table in per_algo.items()},
    )


@cache
def load_presets() -> dict[str, Preset]:
    """Every preset shipped with herl, by name."""
    folder = resources.files("herl") / "presets"
    presets = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            name = entry.name[: -len(".toml")]
            presets[name] = parse_preset(name, entry.read_text(encoding="utf-8"))
    return presets


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        close = difflib.get_close_matches(name, list(presets), n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise CLIError(f"unknown preset {name!r}{hint}; presets: {', '.join(presets)}")
    return presets[name]


def preset_for_env(env_id: str) -> Preset | None:
    """The preset whose ``envs`` patterns match ``env_id``, if any."""
    return next((p for p in load_presets().values() if p.matches(env_id)), None)
