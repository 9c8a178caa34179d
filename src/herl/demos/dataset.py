"""Demonstrations in memory, and on disk in Minari's dataset format (Farama's standard for offline RL data).

A dataset folder written here is a Minari dataset's folder (``DIR/data/metadata.json`` and ``DIR/data/
main_data.hdf5``): ``minari.MinariDataset("DIR/data")`` reads it, and copied under ``~/.minari/datasets/<id>/``
it loads with ``minari.load_dataset(id)``. Dict observations keep every key, goal keys included.

Reading never executes anything from the file: the metadata is JSON, the arrays are HDF5 or Arrow tables, and a
dataset whose metadata lacks its spaces is refused (Minari would then rebuild them by making the env its
metadata names, which imports code).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from herl.errors import HerlError

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
METADATA_FILE = "metadata.json"


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

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.episode_starts.shape[0])

    def check_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        """Raise DatasetError naming the first observation entry (or the actions) whose space differs."""
        check_space_match(self.observation_space, observation_space, self.action_space, action_space)


def check_space_match(data_obs: spaces.Space, env_obs: spaces.Space, data_act: spaces.Space, env_act: spaces.Space) -> None:
    """DatasetError naming what differs between a dataset's spaces and an env's (or a model's)."""
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
                raise DatasetError(f"observation key {key!r} differs: the dataset's is {_describe(data_obs[key])}, "
                                   f"the env's {_describe(space)}")
    elif data_obs != env_obs:
        raise DatasetError(f"observations differ: the dataset's are {_describe(data_obs)}, the env's {_describe(env_obs)}")
    if data_act != env_act:
        raise DatasetError(f"actions differ: the dataset's are {_describe(data_act)}, the env's {_describe(env_act)}")


def _describe(space: spaces.Space) -> str:
    shape = getattr(space, "shape", None)
    return f"{type(space).__name__} of shape {shape}" + (f" ({space})" if shape is not None else f" {space}")


def from_episodes(episodes: list[dict[str, Any]], observation_space: spaces.Space,
                  action_space: spaces.Space) -> Demonstrations:
    """Concatenate episodes given as Minari lays them out (``observations`` with one more row than ``actions``)."""
    if not episodes:
        raise DatasetError("the dataset holds no episodes: record some first (herl record, or generate_expert_traj)")
    dict_obs = isinstance(observation_space, spaces.Dict)
    obs, next_obs, starts, successes = [], [], [], []
    count = 0
    for episode in episodes:
        o = episode["observations"]
        n = len(episode["actions"])
        if n == 0:
            continue
        starts.append(count)
        count += n
        if dict_obs:
            obs.append({k: np.asarray(v)[:n] for k, v in o.items()})
            next_obs.append({k: np.asarray(v)[1:n + 1] for k, v in o.items()})
        else:
            obs.append(np.asarray(o)[:n])
            next_obs.append(np.asarray(o)[1:n + 1])
        success = (episode.get("infos") or {}).get("is_success")
        successes.append(None if success is None or len(success) == 0 else bool(np.asarray(success)[-1]))
    if count == 0:
        raise DatasetError("the dataset's episodes hold no steps")

    def cat(parts: list[Any]) -> Any:
        if dict_obs:
            return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return np.concatenate(parts)

    def steps(key: str, dtype: Any) -> np.ndarray:
        return np.concatenate([np.asarray(e[key], dtype=dtype).reshape(len(e["actions"]), *np.shape(e[key])[1:])
                               for e in episodes if len(e["actions"])])

    return Demonstrations(
        observations=cat(obs), next_observations=cat(next_obs), actions=steps("actions", action_space.dtype),
        rewards=steps("rewards", np.float32), terminations=steps("terminations", bool),
        truncations=steps("truncations", bool), episode_starts=np.asarray(starts, dtype=np.int64),
        observation_space=observation_space, action_space=action_space,
        successes=None if None in successes else np.asarray(successes),
    )


def as_demonstrations(dataset: Demonstrations | str | os.PathLike) -> Demonstrations:
    """``dataset`` itself, or the dataset it names (a folder written by herl or a local Minari id)."""
    if isinstance(dataset, Demonstrations):
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
    """Write ``demos`` as a Minari dataset in the folder ``path`` (which must not hold one); returns the path."""
    minari_storage = _import_minari()
    path = Path(path)
    data_path = path.resolve() / "data"  # Minari joins a relative folder to itself when it measures the file
    if (data_path / METADATA_FILE).exists():
        raise DatasetError(f"{path} already holds a dataset: choose another folder or delete it")
    data_path.mkdir(parents=True, exist_ok=True)
    storage = minari_storage.MinariStorage.new(data_path, observation_space=demos.observation_space,
                                               action_space=demos.action_space, env_spec=env_spec,
                                               data_format=data_format, jpeg_encoding=False)
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
    metadata = {"dataset_id": f"herl/{path.name}-v0", "minari_version": minari_version, "algorithm_name": "herl record"}
    if description:
        metadata["description"] = description
    storage.update_metadata(metadata)
    return path


def load_minari(path_or_id: str | os.PathLike) -> Demonstrations:
    """Read a Minari dataset: a folder written by :func:`save_minari` (or its ``data`` subfolder), or the id of a
    dataset in the local Minari root (``~/.minari/datasets``, or ``MINARI_DATASETS_PATH``); nothing is downloaded."""
    minari_storage = _import_minari()
    data_path = find_data_path(path_or_id)
    try:
        metadata = json.loads((data_path / METADATA_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DatasetError(f"{data_path / METADATA_FILE} cannot be read ({err}): the dataset is damaged") from err
    if "observation_space" not in metadata or "action_space" not in metadata:
        raise DatasetError(f"{data_path} has no observation/action spaces in its metadata: herl does not make the env "
                           "its metadata names to find them (that would run code from the dataset)")
    if metadata.get("data_format") not in ("hdf5", "arrow", "parquet"):
        raise DatasetError(f"{data_path}: unknown data format {metadata.get('data_format')!r}")
    try:
        storage = minari_storage.MinariStorage.read(data_path)
        total = storage.total_episodes
        episodes = list(storage.get_episodes(range(total)))
    except DatasetError:
        raise
    except Exception as err:  # h5py/pyarrow raise OSError, KeyError, ArrowInvalid, ... on damaged files
        raise DatasetError(f"{data_path} cannot be read ({type(err).__name__}: {err}): the file is truncated or "
                           "damaged; record the demonstrations again") from err
    return from_episodes(episodes, storage.observation_space, storage.action_space)


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


def _import_minari() -> Any:
    try:
        from minari.dataset import minari_storage
    except ImportError as err:
        raise ImportError("demonstration datasets use Minari's format: pip install 'herl[demos]'") from err
    return minari_storage
