"""Demonstrations in memory, and on disk in Minari's dataset format (Farama's standard for offline RL data).

A dataset folder written here is a Minari dataset's folder (``DIR/data/metadata.json`` and ``DIR/data/
main_data.hdf5``): ``minari.MinariDataset("DIR/data")`` reads it, and copied under ``~/.minari/datasets/<id>/``
it loads with ``minari.load_dataset(id)``. Dict observations keep every key, goal keys included.

Reading never executes anything from the file: the metadata is JSON, the arrays are HDF5 or Arrow tables, and a
dataset whose metadata lacks its spaces is refused (Minari would then rebuild them by making the env its
metadata names, which imports code). Nor does it read any other file: an HDF5 file whose data lives elsewhere
(external links, external storage, virtual datasets, soft links that lead nowhere in the file) is refused before
any of its data is read. Every episode is checked as it is read: a field that is missing, of the wrong shape or
not numbers is a :class:`DatasetError` naming the file, the episode, the field and the shape and dtype expected.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from herl.errors import HerlError, NonFiniteError
from herl.io.atomic import atomic_folder

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
METADATA_FILE = "metadata.json"
HDF5_FILE = "main_data.hdf5"
EPISODE_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")
"""What each episode holds, in Minari's layout (``infos`` is optional)."""
ENV_SETTINGS_KEY = "herl_env"
"""The metadata entry naming herl's env wrappers the episodes were recorded through."""
ENV_SETTINGS = {"action_repeat": 1, "time_feature": False}
"""The wrappers that entry names, with the value that means "not wrapped": each changes what a step or an
observation of the dataset is (:class:`~herl.envs.ActionRepeat`, :class:`~herl.envs.TimeFeature`)."""


class DatasetError(HerlError, ValueError):
    """A dataset that cannot be used: missing, empty, truncated, or not made for this env."""


@dataclass(frozen=True)
class Demonstrations:
    """Steps of expert episodes, concatenated: row ``i`` is ``observations[i] --actions[i]--> next_observations[i]``.

    Observations are a dict of arrays for Dict spaces (one array per key), else one array.
    """

    observations: dict[str, np.ndarray] | np.ndarray
    next_observations: dict[str, np.ndarray] | np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    episode_starts: np.ndarray
    """Row index of each episode's first step."""
    observation_space: spaces.Space
    action_space: spaces.Space
    successes: np.ndarray | None = None
    """Per episode, whether its last step's info said ``is_success`` (None if the data does not say)."""
    source: str | None = None
    """The file (or folder) they were read from, named in error messages; None for episodes built in memory."""
    env_settings: Mapping[str, Any] | None = None
    """herl's env wrappers the episodes were recorded through, as the ``env.NAME`` settings of ``herl train`` name
    them (``{"action_repeat": 3, "time_feature": True}``; see :data:`ENV_SETTINGS`), kept in the dataset's metadata
    as ``herl_env``; None where the dataset does not say (one recorded by another tool)."""

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.episode_starts.shape[0])

    def check_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        """Raise DatasetError naming the first observation entry (or the actions) whose space differs."""
        check_space_match(self.observation_space, observation_space, self.action_space, action_space)

    def validate(self) -> None:
        """Check that the arrays fit together and fit the dataset's own spaces: a :class:`DatasetError` names the
        field, the shape and dtype expected (and the episode, where one is to blame); NaN or infinity is a
        :class:`~herl.errors.NonFiniteError` naming the episode and the step. Demonstrations read by
        :func:`load_minari` or built by :func:`from_episodes` were checked as they were read."""
        where = "the demonstrations" + (f" from {self.source}" if self.source else "")
        for name in ("observation_space", "action_space"):
            if not isinstance(getattr(self, name), spaces.Space):
                raise DatasetError(f"{where}: {name} is a {type(getattr(self, name)).__name__}, not a gymnasium space")
        act_space, obs_space = self.action_space, self.observation_space
        actions = _numbers(where, "actions", self.actions, f"one row per step, each {_space_shape(act_space)}")
        if actions.ndim == 0:
            raise DatasetError(f"{where}: actions is a single number; expected one row per step, each "
                               f"{_space_shape(act_space)} ({act_space.dtype})")
        n = len(actions)
        if n == 0:
            raise DatasetError(f"{where} hold no steps: record some first (herl record, or generate_expert_traj)")
        per_step = f"one row per step; the demonstrations hold {n} actions"
        actions = _shaped(where, "actions", actions, (n, *_space_shape(act_space)), act_space.dtype,
                          "one row per step", column_ok=isinstance(act_space, spaces.Discrete))
        starts = _numbers(where, "episode_starts", self.episode_starts, "the row of each episode's first step")
        if starts.ndim != 1 or starts.dtype.kind not in "iu" or not len(starts) or starts[0] != 0 \
                or np.any(np.diff(starts) <= 0) or starts[-1] >= n:
            raise DatasetError(f"{where}: episode_starts {np.asarray(starts).tolist()[:8]} is not the row of each episode's "
                               f"first step: integers from 0, increasing, below the {n} steps")
        for field in ("rewards", "terminations", "truncations"):
            _shaped(where, field, _numbers(where, field, getattr(self, field), "one value per step"), (n,),
                    np.float32 if field == "rewards" else np.bool_, per_step)
        for field in ("observations", "next_observations"):
            what = "observation" if field == "observations" else "next observation"
            value = getattr(self, field)
            entries = _observation_entries(where, what, value, obs_space)
            for key, (sub, array) in entries.items():
                name = what if key is None else f"{what} {key!r}"
                array = _shaped(where, name, _numbers(where, name, array, "one row per step"),
                                (n, *_space_shape(sub)), sub.dtype, per_step)
                _check_finite_rows(where, name, array, starts, sub.dtype)
        _check_finite_rows(where, "actions", actions, starts, act_space.dtype)
        _check_finite_rows(where, "rewards", np.asarray(self.rewards), starts, np.float32)
        for field in ("terminations", "truncations"):
            _check_flags(where, field, np.asarray(getattr(self, field)), starts)
        _check_actions_in_space(where, actions, act_space, starts)
        if self.successes is not None and np.shape(self.successes) != (len(starts),):
            raise DatasetError(f"{where}: successes has shape {np.shape(self.successes)}, expected ({len(starts)},): "
                               "one flag per episode (or None)")


def check_space_match(data_obs: spaces.Space, env_obs: spaces.Space, data_act: spaces.Space, env_act: spaces.Space, *,
                      hint: str | None = None) -> None:
    """DatasetError naming what differs between a dataset's spaces and an env's (or a model's); a differing
    observation ends with ``hint`` (by default, that the wrappers of the env may differ)."""
    hint = _WRAPPER_HINT if hint is None else hint
    if isinstance(env_obs, spaces.Dict):
        if not isinstance(data_obs, spaces.Dict):
            raise DatasetError(f"the env's observations are a dict with keys {sorted(env_obs.spaces)}; the dataset's "
                               f"are {data_obs}: record the demonstrations on this env")
        missing = [k for k in env_obs.spaces if k not in data_obs.spaces]
        if missing:
            goal = " (goal keys: HER and goal-conditioned policies need them)" if set(missing) & set(GOAL_KEYS) else ""
            raise DatasetError(f"the dataset's observations lack the key(s) {missing}{goal}; it has "
                               f"{sorted(data_obs.spaces)}: record the demonstrations with the env's dict observations")
        for key, space in env_obs.spaces.items():
            if data_obs[key] != space:
                raise DatasetError(f"observation key {key!r} differs: the dataset's is {_describe(data_obs[key], space)}, "
                                   f"the env's {_describe(space, data_obs[key])}{hint}")
    elif data_obs != env_obs:
        raise DatasetError(f"observations differ: the dataset's are {_describe(data_obs, env_obs)}, the env's "
                           f"{_describe(env_obs, data_obs)}{hint}")
    if data_act != env_act:
        raise DatasetError(f"actions differ: the dataset's are {_describe(data_act, env_act)}, the env's "
                           f"{_describe(env_act, data_act)}")


_WRAPPER_HINT = (": record the demonstrations through the wrappers of the env they train on (a wrapper on one side "
                 "only changes the observation: herl.envs.TimeFeature, env.time_feature on the command line, appends "
                 "one entry to it)")


def _describe(space: spaces.Space, other: spaces.Space | None = None) -> str:
    """The space's type and shape, and its bounds only where the shapes agree (a 26-entry Box's bounds say nothing
    about why it differs from a 25-entry one)."""
    shape = getattr(space, "shape", None)
    if shape is None:
        return f"{type(space).__name__} {space}"
    if other is not None and getattr(other, "shape", None) != shape:
        return f"{type(space).__name__} of shape {shape} ({space.dtype})"
    return f"{type(space).__name__} of shape {shape} ({space})"


def from_episodes(episodes: list[dict[str, Any]], observation_space: spaces.Space,
                  action_space: spaces.Space, *, source: str | None = None) -> Demonstrations:
    """Concatenate episodes given as Minari lays them out (``observations`` with one more row than ``actions``).

    Each episode is checked first: a missing field, a field of the wrong shape or one that holds no numbers is a
    :class:`DatasetError` naming the episode (its index, and its ``id`` where that differs), the field and the shape
    and dtype expected; NaN or infinity is a :class:`~herl.errors.NonFiniteError` naming the step. ``source`` (the
    file they were read from) starts each message."""
    if not episodes:
        raise DatasetError(f"{source or 'the dataset'} holds no episodes: record some first (herl record, or "
                           "generate_expert_traj)")
    read = []
    for index, episode in enumerate(episodes):
        steps = _read_episode(_episode_name(source, index, episode), episode, observation_space, action_space)
        if steps is not None:
            read.append(steps)
    if not read:
        raise DatasetError(f"{source or 'the dataset'}: its episodes hold no steps")
    starts = np.cumsum([0] + [len(r["actions"]) for r in read[:-1]]).astype(np.int64)

    def cat(name: str) -> Any:
        if isinstance(observation_space, spaces.Dict):
            return {k: np.concatenate([r[name][k] for r in read]) for k in observation_space.spaces}
        return np.concatenate([r[name] for r in read])

    successes = [r["success"] for r in read]
    return Demonstrations(
        observations=cat("observations"), next_observations=cat("next_observations"),
        actions=np.concatenate([r["actions"] for r in read]).astype(action_space.dtype, copy=False),
        rewards=np.concatenate([r["rewards"] for r in read]).astype(np.float32, copy=False),
        terminations=np.concatenate([r["terminations"] for r in read]).astype(bool, copy=False),
        truncations=np.concatenate([r["truncations"] for r in read]).astype(bool, copy=False),
        episode_starts=starts, observation_space=observation_space, action_space=action_space,
        successes=None if None in successes else np.asarray(successes), source=source,
    )


def as_demonstrations(dataset: Demonstrations | str | os.PathLike) -> Demonstrations:
    """``dataset`` itself (checked with :meth:`Demonstrations.validate`), or the dataset it names (a folder written by
    herl or a local Minari id)."""
    if isinstance(dataset, Demonstrations):
        dataset.validate()
        return dataset
    if not isinstance(dataset, (str, os.PathLike)):
        raise TypeError(f"demonstrations must be a herl.demos.Demonstrations, a dataset folder or a Minari id, got "
                        f"{type(dataset).__name__}")
    return load_minari(dataset)


def policy_scale(actions: np.ndarray, space: spaces.Space) -> np.ndarray:
    """Demo actions as the policy and the replay buffer hold them: bounded boxes scaled to [-1, 1] (float32),
    Discrete actions as indices from 0 (int64, shaped (n, 1)); other spaces as they are."""
    actions = np.asarray(actions)
    if isinstance(space, spaces.Discrete):
        return (actions.reshape(-1).astype(np.int64) - int(space.start)).reshape(-1, 1)
    if isinstance(space, spaces.Box) and np.isfinite(space.low).all() and np.isfinite(space.high).all():
        scaled = 2.0 * (actions.astype(np.float64) - space.low) / (space.high - space.low) - 1.0
        return np.clip(scaled, -1.0, 1.0).astype(np.float32)
    return actions


def save_minari(demos: Demonstrations, path: str | os.PathLike, *, env_spec: Any = None,
                data_format: str = "hdf5", description: str | None = None) -> Path:
    """Write ``demos`` as a Minari dataset in the folder ``path`` (which must not hold one); returns the path.
    ``demos.env_settings``, where known, goes into the metadata as ``herl_env``.

    The dataset is written into a temporary folder beside ``data`` and renamed to ``data`` once complete and on disk:
    an error (a full disk) or a kill on the way leaves no half-written dataset that would load.

    Minari stores ``env_spec`` as JSON: an env registered with a class or function as its entry point is stored with
    the entry point's ``module:name`` (what ``gymnasium.register`` also takes), and a spec that still cannot be
    written as JSON (a callable among its settings) is left out, with a warning."""
    minari_storage = _import_minari()
    env_spec = _jsonable_spec(env_spec)
    path = Path(path)
    data_path = check_dataset_target(path)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_folder(data_path) as tmp:  # onto nothing, or onto an empty folder
        _write_minari(minari_storage, demos, tmp, path.name, env_spec, data_format, description)
    return path


def _jsonable_spec(env_spec: Any) -> Any:
    """``env_spec`` as Minari can store it (see :func:`save_minari`), or None."""
    if env_spec is None:
        return None
    entry = env_spec.entry_point
    if callable(entry) and "<locals>" not in getattr(entry, "__qualname__", "<locals>"):
        env_spec = dataclasses.replace(env_spec, entry_point=f"{entry.__module__}:{entry.__qualname__}")
    try:
        env_spec.to_json()
    except (TypeError, ValueError) as err:
        warnings.warn(f"the dataset is written without its env's spec, which cannot be stored as JSON ({err}); "
                      "herl does not need it, Minari's recover_environment() does", stacklevel=3)
        return None
    return env_spec


def check_dataset_target(path: str | os.PathLike) -> Path:
    """The ``data`` folder a dataset written to ``path`` goes to, once it is clear that one can be: a DatasetError if
    ``path`` holds a dataset already, or a ``data`` entry that is not an empty folder (never overwritten)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DatasetError(f"{path} is a file: a dataset is a folder; choose another name")
    data_path = path.resolve() / "data"  # Minari joins a relative folder to itself when it measures the file
    if (data_path / METADATA_FILE).exists():
        raise DatasetError(f"{path} already holds a dataset: choose another folder or delete it")
    if data_path.is_symlink() or (data_path.exists() and (not data_path.is_dir() or any(data_path.iterdir()))):
        raise DatasetError(f"{data_path} exists and is not a dataset (nor an empty folder): herl writes the dataset "
                           "there and does not overwrite it; choose another folder or delete it")
    return data_path


def _write_minari(minari_storage: Any, demos: Demonstrations, data_path: Path, name: str, env_spec: Any,
                  data_format: str, description: str | None) -> None:
    # images stored as recorded: Minari 0.5.4 encodes them as JPEG (lossy) unless told not to; before, it never did
    lossless = ({"jpeg_encoding": False}
                if "jpeg_encoding" in inspect.signature(minari_storage.MinariStorage.new).parameters else {})
    storage = minari_storage.MinariStorage.new(data_path, observation_space=demos.observation_space,
                                               action_space=demos.action_space, env_spec=env_spec,
                                               data_format=data_format, **lossless)
    from minari import __version__ as minari_version
    from minari.data_collector import EpisodeBuffer

    ends = [*demos.episode_starts[1:], len(demos)]
    buffers = []
    for index, (start, end) in enumerate(zip(demos.episode_starts, ends)):
        if isinstance(demos.observations, dict):
            observations = {k: np.concatenate([demos.observations[k][start:end], demos.next_observations[k][end - 1:end]])
                            for k in demos.observations}
        else:
            observations = np.concatenate([demos.observations[start:end], demos.next_observations[end - 1:end]])
        infos = {}
        if demos.successes is not None:  # Minari's infos have a row per observation (the reset's first)
            infos["is_success"] = np.zeros(end - start + 1, dtype=bool)
            infos["is_success"][-1] = demos.successes[index]
        buffers.append(EpisodeBuffer(id=index, observations=observations, actions=demos.actions[start:end],
                                     rewards=list(demos.rewards[start:end]), terminations=list(demos.terminations[start:end]),
                                     truncations=list(demos.truncations[start:end]), infos=infos))
    storage.update_episodes(buffers)
    metadata = {"dataset_id": f"herl/{name}-v0", "minari_version": minari_version, "algorithm_name": "herl record"}
    if description:
        metadata["description"] = description
    if demos.env_settings is not None:
        metadata[ENV_SETTINGS_KEY] = dict(demos.env_settings)
    storage.update_metadata(metadata)


def load_minari(path_or_id: str | os.PathLike) -> Demonstrations:
    """Read a Minari dataset: a folder written by :func:`save_minari` (or its ``data`` subfolder), or the id of a
    dataset in the local Minari root (``~/.minari/datasets``, or ``MINARI_DATASETS_PATH``); nothing is downloaded."""
    data_path, metadata, storage = _open(path_or_id)
    total = metadata["total_episodes"]
    source = data_path / HDF5_FILE if metadata["data_format"] == "hdf5" else data_path
    if metadata["data_format"] == "hdf5":
        check_hdf5_file(source, storage.observation_space, storage.action_space, total)
    episodes: list[dict[str, Any]] = []
    try:
        for episode in storage.get_episodes(range(total)):
            episodes.append(episode)
    except Exception as err:  # h5py/pyarrow raise OSError, KeyError, ArrowInvalid, ... on damaged files
        raise DatasetError(f"{source}: episode {len(episodes)} cannot be read ({type(err).__name__}: {err}): the file "
                           "is truncated or damaged; record the demonstrations again") from err
    demos = from_episodes(episodes, storage.observation_space, storage.action_space, source=str(source))
    return dataclasses.replace(demos, env_settings=_env_settings(data_path, metadata))


class RecordedEnv(NamedTuple):
    """What a dataset's metadata says of the env its episodes were recorded in."""

    observation_space: spaces.Space
    action_space: spaces.Space
    settings: Mapping[str, Any] | None
    """herl's wrappers (``herl_env``, as :attr:`Demonstrations.env_settings`); None where the dataset does not say."""


def recorded_env(path_or_id: str | os.PathLike) -> RecordedEnv:
    """The spaces and env settings of the dataset at ``path_or_id``, read from its metadata (none of its episodes
    are read, so a check against an env costs nothing beside loading it)."""
    data_path, metadata, storage = _open(path_or_id)
    return RecordedEnv(storage.observation_space, storage.action_space, _env_settings(data_path, metadata))


def _open(path_or_id: str | os.PathLike) -> tuple[Path, dict[str, Any], Any]:
    """The dataset's ``data`` folder, its metadata (checked) and Minari's storage, which has read only the metadata."""
    minari_storage = _import_minari()
    data_path = find_data_path(path_or_id)
    metadata = _read_metadata(data_path)
    if "observation_space" not in metadata or "action_space" not in metadata:
        raise DatasetError(f"{data_path} has no observation/action spaces in its metadata: herl does not make the env "
                           "its metadata names to find them (that would run code from the dataset)")
    if metadata.get("data_format") not in ("hdf5", "arrow", "parquet"):
        raise DatasetError(f"{data_path}: unknown data format {metadata.get('data_format')!r}")
    total = metadata.get("total_episodes")
    if type(total) is not int or total < 0:
        raise DatasetError(f"{data_path / METADATA_FILE}: total_episodes is {total!r}, not a count of episodes: the "
                           "dataset is damaged; record the demonstrations again")
    try:
        storage = minari_storage.MinariStorage.read(data_path)  # the metadata only: no data is read here
    except Exception as err:  # a space Minari cannot rebuild, a missing data file
        raise DatasetError(f"{data_path} cannot be read ({type(err).__name__}: {err}): the dataset is damaged; record "
                           "the demonstrations again") from err
    return data_path, metadata, storage


def _read_metadata(data_path: Path) -> dict[str, Any]:
    try:
        metadata = json.loads((data_path / METADATA_FILE).read_text())
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON, bad UTF-8, a 5,000-digit number
        raise DatasetError(f"{data_path / METADATA_FILE} cannot be read ({err}): the dataset is damaged") from err
    if not isinstance(metadata, dict):
        raise DatasetError(f"{data_path / METADATA_FILE} holds a {type(metadata).__name__}, not Minari's metadata: "
                           "the dataset is damaged")
    return metadata


def _env_settings(data_path: Path, metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    settings = metadata.get(ENV_SETTINGS_KEY)
    if settings is None:
        return None
    expected = ('expected {"action_repeat": a whole number >= 1, "time_feature": true or false}: the dataset is '
                "damaged; record the demonstrations again")
    if not isinstance(settings, dict) or set(ENV_SETTINGS) - set(settings):
        raise DatasetError(f"{data_path / METADATA_FILE}: {ENV_SETTINGS_KEY} is {settings!r}; {expected}")
    repeat, time_feature = settings["action_repeat"], settings["time_feature"]
    if type(repeat) is not int or repeat < 1 or type(time_feature) is not bool:
        raise DatasetError(f"{data_path / METADATA_FILE}: {ENV_SETTINGS_KEY} is {settings!r}; {expected}")
    return {key: settings[key] for key in ENV_SETTINGS}


def find_data_path(path_or_id: str | os.PathLike) -> Path:
    path = Path(path_or_id)
    for candidate in (path / "data", path):
        if (candidate / METADATA_FILE).is_file():
            return candidate
    if path.exists():
        raise DatasetError(f"{path} is not a Minari dataset (no data/{METADATA_FILE} in it)")
    from minari.storage.datasets_root_dir import get_dataset_path

    local = Path(get_dataset_path(str(path_or_id))) / "data"
    if (local / METADATA_FILE).is_file():
        return local
    raise DatasetError(f"no dataset at {path_or_id!r}: give a folder written by `herl record` or "
                       "generate_expert_traj, or the id of a dataset in your local Minari root")


# ---------------------------------------------------------------------------------------------------------------------
# checking what is read


def _episode_name(source: str | None, index: int, episode: Any) -> str:
    """``FILE: episode 3`` (with the episode's own id where it differs from its index)."""
    given = episode.get("id") if isinstance(episode, Mapping) else None
    name = f"episode {index}" if given is None or given == index else f"episode {index} (id {given!r})"
    return f"{source}: {name}" if source else name


def _space_shape(space: spaces.Space) -> tuple[int, ...]:
    return tuple(getattr(space, "shape", None) or ())


def _expected(shape: tuple[Any, ...], dtype: Any) -> str:
    """``shape (steps, 3) of float32``: ``shape`` may hold words (``"steps"``) besides sizes."""
    text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    return f"shape {text} of {np.dtype(dtype)}" if dtype is not None else f"shape {text} of numbers"


def _numbers(where: str, field: str, value: Any, note: str) -> np.ndarray:
    """``value`` as an array of numbers (bools count), or a DatasetError naming ``field``."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as err:  # ragged lists
        raise DatasetError(f"{where}: {field} is not an array ({err}); expected numbers, {note}") from None
    if array.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: {field} holds {array.dtype} values, not numbers; expected numbers, {note}")
    return array


def _shaped(where: str, field: str, array: np.ndarray, shape: tuple[int, ...], dtype: Any, note: str, *,
            column_ok: bool = False) -> np.ndarray:
    """``array`` if it has ``shape`` (or ``shape + (1,)`` with ``column_ok``: a column of values), else a DatasetError
    naming ``field``, its shape and the one expected."""
    if column_ok and array.shape == (*shape, 1):
        array = array.reshape(shape)
    if array.shape != shape:
        raise DatasetError(f"{where}: {field} has shape {array.shape}, expected {_expected(shape, dtype)} ({note})")
    return array


def _observation_entries(where: str, what: str, value: Any, space: spaces.Space,
                         rows: str = "steps") -> dict[str | None, tuple[Any, Any]]:
    """``{key: (subspace, values)}`` of a dict observation space (key None for any other space); a DatasetError for a
    missing key or an observation that is not a dict where the space is."""
    if not isinstance(space, spaces.Dict):
        if isinstance(value, Mapping):
            raise DatasetError(f"{where}: the {what}s are a dict with keys {sorted(value)}, but the observation space is "
                               f"{_describe(space)}")
        return {None: (space, value)}
    if not isinstance(value, Mapping):
        raise DatasetError(f"{where}: the {what}s are a {type(value).__name__}, expected a dict with the keys "
                           f"{list(space.spaces)} (the observation space's)")
    for key, sub in space.spaces.items():
        if key not in value:
            raise DatasetError(f"{where}: the {what}s lack the key {key!r}; expected it as an array of "
                               f"{_expected((rows, *_space_shape(sub)), sub.dtype)} (the observation space has "
                               f"the keys {list(space.spaces)}): record the demonstrations again")
    return {key: (sub, value[key]) for key, sub in space.spaces.items()}


def _check_finite_rows(where: str, field: str, array: np.ndarray, starts: np.ndarray | None,
                       stored: Any = None) -> None:
    """A NonFiniteError naming the episode and the step of ``field``'s first NaN or infinity (``starts``: the row of
    each episode's first step, None when ``array`` is one episode's); also of a value beyond the float dtype ``stored``
    that the replay buffer keeps it in (1e300 becomes infinity in float32)."""
    if array.dtype.kind != "f":
        return
    stored = np.dtype(stored) if stored is not None else array.dtype
    narrower = stored.kind == "f" and stored.itemsize < array.dtype.itemsize
    with np.errstate(over="ignore"):  # the overflow is what this looks for
        finite = np.isfinite(array.astype(stored) if narrower else array)
    if finite.all():
        return
    bad = ~finite.reshape(len(array), -1).all(axis=1)
    row = int(np.flatnonzero(bad)[0])
    if starts is None:
        at = f"at step {row}"
    else:
        episode = int(np.searchsorted(starts, row, side="right")) - 1
        at = f"in episode {episode}, at step {row - int(starts[episode])} (row {row})"
    values = array.reshape(len(array), -1)[row]
    if np.isfinite(values).all():  # finite as read, infinite once stored
        big = values[np.argmax(np.abs(values))]
        raise NonFiniteError(f"{where}: {field} holds {big:.3g} {at}, which overflows {stored} (the dtype of its "
                             f"space, at most {np.finfo(stored).max:.3g}): scale it down, or record the demonstrations "
                             "again")
    raise NonFiniteError(f"{where}: {field} holds NaN or infinity {at}: record the demonstrations again")


def _check_flags(where: str, field: str, flags: np.ndarray, starts: np.ndarray | None) -> None:
    """Termination and truncation flags are true/false (or 0/1): NaN or 0.5 would silently become True."""
    if flags.dtype.kind == "b":
        return
    bad = (flags != 0) & (flags != 1)
    if bad.any():
        row = int(np.flatnonzero(bad.reshape(-1))[0])
        at = f"step {row}" if starts is None else f"row {row}"
        raise DatasetError(f"{where}: {field} holds {flags.reshape(-1)[row]!r} at {at}; expected flags, true or false "
                           "(or 1 and 0)")


def _check_actions_in_space(where: str, actions: np.ndarray, space: spaces.Space, starts: np.ndarray | None) -> None:
    """Discrete actions must be whole numbers of the space (the policy's output is indexed by them)."""
    if not isinstance(space, spaces.Discrete) or not len(actions):
        return
    flat = actions.reshape(-1)
    bad = (flat != np.round(flat)) | (flat < space.start) | (flat >= space.start + space.n)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        at = f"step {row}" if starts is None else f"row {row}"
        raise DatasetError(f"{where}: actions hold {flat[row]!r} at {at}, not an action of {space}: expected whole "
                           f"numbers from {space.start} to {space.start + space.n - 1}")


def _read_episode(where: str, episode: Any, observation_space: spaces.Space,
                  action_space: spaces.Space) -> dict[str, Any] | None:
    """One episode's steps, checked (None for an episode without steps)."""
    if not isinstance(episode, Mapping):
        raise DatasetError(f"{where} is a {type(episode).__name__}, expected a dict with the fields "
                           f"{list(EPISODE_FIELDS)}")
    missing = [field for field in EPISODE_FIELDS if episode.get(field) is None]
    if missing:
        raise DatasetError(f"{where} has no {' and no '.join(map(repr, missing))}: an episode holds "
                           f"{', '.join(EPISODE_FIELDS)} (Minari's layout); record the demonstrations again")
    act_shape = _space_shape(action_space)
    actions = _numbers(where, "actions", episode["actions"], f"one row per step, each shaped {act_shape}")
    if actions.ndim == 0:
        raise DatasetError(f"{where}: actions is a single number; expected one row per step, each shaped {act_shape} "
                           f"({action_space.dtype})")
    n = len(actions)
    if n == 0:
        return None
    actions = _shaped(where, "actions", actions, (n, *act_shape), action_space.dtype, "one row per step",
                      column_ok=isinstance(action_space, spaces.Discrete))
    _check_finite_rows(where, "actions", actions, None, action_space.dtype)
    _check_actions_in_space(where, actions, action_space, None)
    steps: dict[str, Any] = {"actions": actions}
    for field in ("rewards", "terminations", "truncations"):
        dtype = np.float32 if field == "rewards" else np.bool_
        steps[field] = _shaped(where, field, _numbers(where, field, episode[field], f"one value per step ({n})"),
                               (n,), dtype, f"one value per step; the episode has {n} actions", column_ok=True)
    _check_finite_rows(where, "rewards", steps["rewards"], None, np.float32)
    for field in ("terminations", "truncations"):
        _check_flags(where, field, steps[field], None)
    rows_note = f"one row per step and the last observation; the episode has {n} actions"
    observations, next_observations = {}, {}
    entries = _observation_entries(where, "observation", episode["observations"], observation_space, "steps + 1")
    if isinstance(observation_space, spaces.Dict):
        extra = sorted(set(episode["observations"]) - set(observation_space.spaces))
        if extra:
            raise DatasetError(f"{where}: the observations hold the key(s) {extra}, which the dataset's observation "
                               f"space lacks (it has {list(observation_space.spaces)}): the dataset is damaged")
    for key, (sub, value) in entries.items():
        name = "observations" if key is None else f"observation {key!r}"
        array = _shaped(where, name, _numbers(where, name, value, rows_note), (n + 1, *_space_shape(sub)), sub.dtype,
                        rows_note)
        _check_finite_rows(where, name, array, None, sub.dtype)
        observations[key], next_observations[key] = array[:n], array[1:]
    if None in observations:
        observations, next_observations = observations[None], next_observations[None]
    steps.update(observations=observations, next_observations=next_observations)
    infos = episode.get("infos")
    success = infos.get("is_success") if isinstance(infos, Mapping) else None
    success = None if success is None else np.ravel(np.asarray(success))
    steps["success"] = None if success is None or len(success) == 0 else bool(success[-1])
    return steps


def check_hdf5_file(path: Path, observation_space: spaces.Space, action_space: spaces.Space, episodes: int) -> None:
    """Before any data is read: refuse an HDF5 file whose data would come from elsewhere (an external link, a dataset
    with external storage or a virtual one, a soft link that leads nowhere in the file: h5py would read those other
    files, and the bytes of ``/etc/hostname`` would become rewards), and name what an episode lacks or holds in excess
    (Minari would raise a bare KeyError, or leave a key out silently). Each DatasetError names the path inside the file."""
    import h5py

    try:
        file = h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(f"{path} cannot be read ({type(err).__name__}: {err}): the file is truncated or damaged; "
                           "record the demonstrations again") from err
    refuse = (f"herl reads only data held in {path.name} itself, so the dataset was refused before any of its data was "
              "read; record the demonstrations again (herl record), or copy the data into the file")
    with file:
        try:
            layout = _check_hdf5_storage(path, file, refuse)
            for index in range(episodes):
                _check_hdf5_episode(path, file, layout, index, observation_space, action_space)
        except DatasetError:
            raise
        except Exception as err:  # a damaged file: h5py raises OSError, KeyError, RuntimeError, ...
            raise DatasetError(f"{path} cannot be read ({type(err).__name__}: {err}): the file is truncated or damaged; "
                               "record the demonstrations again") from err


def _check_hdf5_storage(path: Path, file: Any, refuse: str) -> dict[str, Any]:
    """Refuse links out of the file and datasets whose data is elsewhere. HDF5's own visits (H5Lvisit, H5Ovisit)
    look at every link and every object reached through hard links, each once (a group linked into itself ends),
    following no soft or external link and reading no data; h5py's low-level calls keep it to microseconds a link.

    Returns the file's layout as the episode checks read it: ``{path: children}`` for groups (the names of their
    links), ``{path: ndim}`` for datasets (0 for a single value), paths without a leading slash."""
    import h5py

    links: list[tuple[bytes, int]] = []
    file.id.links.visit(lambda name, info: links.append((name, info.type)), info=True)
    for name, kind in links:
        if kind == h5py.h5l.TYPE_EXTERNAL:
            target_file, target = file.id.links.get_val(name)
            raise DatasetError(f"{path}: /{name.decode()} is an external link to {target_file.decode()}:"
                               f"{target.decode()}: {refuse}")
        if kind not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT):
            raise DatasetError(f"{path}: /{name.decode()} is a user-defined link (type {kind}), not data stored in the "
                               f"file: {refuse}")
    for name, kind in links:  # with no external link left, a soft link resolves within the file, or nowhere
        if kind == h5py.h5l.TYPE_SOFT and file.get(name.decode()) is None:
            raise DatasetError(f"{path}: /{name.decode()} is a soft link to {file.id.links.get_val(name).decode()}, "
                               f"which is not in the file: {refuse}")
    objects: list[tuple[bytes, int]] = []
    h5py.h5o.visit(file.id, lambda name, info: objects.append((name, info.type)), info=True)
    layout: dict[str, Any] = {name.decode(): set() for name, kind in objects if kind == h5py.h5o.TYPE_GROUP}
    layout[""] = set()
    for name, _ in links:
        parent, _, child = name.decode().rpartition("/")
        if isinstance(layout.get(parent), set):
            layout[parent].add(child)
    for name in (name for name, kind in objects if kind == h5py.h5o.TYPE_DATASET):
        dataset = h5py.h5d.open(file.id, name)
        space = dataset.get_space()
        layout[name.decode()] = 0 if space.get_simple_extent_type() != h5py.h5s.SIMPLE else space.get_simple_extent_ndims()
        plist = dataset.get_create_plist()
        if plist.get_external_count():
            where = ", ".join(plist.get_external(i)[0].decode() for i in range(plist.get_external_count()))
            raise DatasetError(f"{path}: /{name.decode()} keeps its data outside the file (external storage in "
                               f"{where}): {refuse}")
        if plist.get_layout() == h5py.h5d.VIRTUAL:
            raise DatasetError(f"{path}: /{name.decode()} is a virtual dataset, made of data in other files: {refuse}")
    return layout


def _check_hdf5_episode(path: Path, file: Any, layout: dict[str, Any], index: int, observation_space: spaces.Space,
                        action_space: spaces.Space) -> None:
    """Every field of the episode is where Minari reads it: a group for each dict space, an array for the rest."""
    import h5py

    def find(name: str) -> Any:  # the layout's entry (children or ndim); None if missing
        if name in layout:
            return layout[name]
        node = file.get(name)  # through a soft link within the file (the rest were refused)
        if isinstance(node, h5py.Group):
            return set(node)
        return None if node is None else (len(node.shape) if node.shape is not None else 0)

    name = f"episode_{index}"
    group = find(name)
    if not isinstance(group, set):
        raise DatasetError(f"{path}: episode {index}: /{name} is {'missing' if group is None else 'not a group'}, but the "
                           f"metadata counts {index + 1} or more episodes: the dataset is damaged")
    expected: list[tuple[str, spaces.Space | None]] = [("observations", observation_space), ("actions", action_space),
                                                      ("rewards", None), ("terminations", None), ("truncations", None)]
    while expected:
        field, space = expected.pop(0)
        node = find(f"{name}/{field}")
        what = f"{path}: episode {index}: /{name}/{field}"
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            keys = list(space.spaces) if isinstance(space, spaces.Dict) else [f"_index_{i}" for i in range(len(space))]
            if not isinstance(node, set):
                raise DatasetError(f"{what} is {'missing' if node is None else 'an array'}; expected a group with the "
                                   f"keys {keys} (the {field.rstrip('s')} space is {type(space).__name__})")
            extra = sorted(node - set(keys))
            if extra:
                raise DatasetError(f"{what} holds the key(s) {extra}, which the dataset's {field.split('/')[0][:-1]} "
                                   f"space lacks (it has {keys}): the dataset is damaged")
            subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
            expected.extend((f"{field}/{key}", sub) for key, sub in zip(keys, subspaces))
            continue
        lead = "steps + 1" if field.startswith("observations") else "steps"
        shape = (lead, *(_space_shape(space) if space is not None else ()))
        dtype = space.dtype if space is not None else None
        if node is None:
            raise DatasetError(f"{what} is missing; expected an array of {_expected(shape, dtype)}: record the "
                               "demonstrations again")
        if isinstance(node, set) or node == 0:
            kind = "a group" if isinstance(node, set) else "a single value"
            raise DatasetError(f"{what} is {kind}; expected an array of {_expected(shape, dtype)}")


def _import_minari() -> Any:
    try:
        from minari.dataset import minari_storage
    except ImportError as err:
        raise ImportError("demonstration datasets use Minari's format: pip install 'herl[demos]'") from err
    return minari_storage
