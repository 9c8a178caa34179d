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
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from herl.run.config import ALGOS, RUN_KEYS, SECTIONS, tomllib
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
    algo: str | None
    """Default algorithm (a settings file of the user's may leave it to --algo: None)."""
    common: dict[str, Any]
    """Settings for every algorithm."""
    per_algo: dict[str, dict[str, Any]]
    """Settings for one algorithm, by algorithm."""

    def matches(self, env_id: str) -> bool:
        bare_id = env_id.rpartition(":")[2]  # module:EnvId
        return any(fnmatch.fnmatchcase(bare_id, pattern) for pattern in self.envs)

    def env_id(self) -> str | None:
        """The env id of a preset made for one env (a sweep's ``best.toml``): its only pattern, if it is a plain id."""
        if len(self.envs) == 1 and not any(c in self.envs[0] for c in "*?["):
            return self.envs[0]
        return None

    def env_kwargs(self, algo: str) -> dict[str, Any]:
        """The env settings (``env.NAME``, without ``env.``) that the preset gives a run of ``algo``."""
        return {key[4:]: value for _, layer in self.layers(algo) for key, value in layer.items()
                if key.startswith("env.")}

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


def parse_preset(name: str, text: str, source: str | None = None) -> Preset:
    """A preset from its TOML ``text``; ``source`` names it in messages (herl's own: ``preset file NAME.toml``). A
    settings file of the user's (``source`` given) may leave out ``algo``: ``--algo``, or the env's default, decides."""
    users = source is not None
    source = source or f"preset file {name}.toml"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CLIError(f"{source} is not valid TOML: {err}") from err
    except RecursionError:
        raise CLIError(f"{source} nests arrays or tables too deeply for a settings file") from None
    algo = data.get("algo")
    if algo not in ALGOS and not (users and algo is None):
        raise CLIError(f"{source}: algo must be one of {', '.join(ALGOS)}, got {algo!r} (e.g. algo = \"tqc\")")
    envs = data.get("envs", ())
    if isinstance(envs, str) or not all(isinstance(e, str) for e in envs):
        raise CLIError(f"{source}: envs must be a list of env ids or patterns, e.g. envs = [\"FetchPush-v*\"], got "
                       f"{envs!r}")
    per_algo = data.get("algos", {})
    unknown = sorted(set(per_algo) - set(ALGOS))
    if unknown:
        raise CLIError(f"{source}: unknown [algos.*] table(s) {unknown}; use {', '.join(ALGOS)}")
    return Preset(
        name=name, description=str(data.get("description", "")), envs=tuple(envs), algo=algo,
        common=_settings(_flatten({k: v for k, v in data.items() if k not in _HEADER_KEYS}, source), source),
        per_algo={a: _settings(_flatten(table, f"{source} [algos.{a}]"), f"{source} [algos.{a}]")
                  for a, table in per_algo.items()},
    )


def _settings(flat: dict[str, Any], source: str) -> dict[str, Any]:
    """A preset's settings, without HER options removed since it was written (with a note that they are ignored)."""
    from herl.buffers.her import drop_removed_options

    return drop_removed_options(flat, source, prefix="her.")


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


def read_preset_file(path: Path) -> Preset:
    """A preset file of the user's (``herl train --config``), in the format of herl's own."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read the preset file {path}: {err}") from None
    return parse_preset(str(path), text, source=f"the settings file {path}")


def format_preset(*, description: str, envs: list[str], algo: str, settings: dict[str, Any]) -> str:
    """A preset file (TOML) holding ``settings`` (dotted keys): the run's and sections' settings for every
    algorithm, the algorithm's hyperparameters in its ``[algos.<algo>]`` table. :func:`parse_preset` reads it back."""
    common = {k: v for k, v in settings.items() if "." in k or k in RUN_KEYS}
    own = {k: v for k, v in settings.items() if k not in common}
    lines = [f"description = {_toml(description)}", f"envs = {_toml(envs)}", f"algo = {_toml(algo)}", ""]
    lines += [f"{key} = {_toml(value)}" for key, value in sorted(common.items())]
    lines += ["", f"[algos.{algo}]", *(f"{key} = {_toml(value)}" for key, value in sorted(own.items()))]
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml(value: Any) -> str:
    """A TOML value for the settings' types: booleans, numbers, strings, and lists and tables of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):  # an inline table: policy.net_arch = {pi = [...], qf = [...]}
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise CLIError(f"a preset file cannot hold {value!r} ({type(value).__name__})")
