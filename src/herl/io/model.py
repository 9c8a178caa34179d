"""Model files: a herl archive (zip of JSON + safetensors, see :mod:`herl.io.archive`), never pickle.

``meta.json`` holds the algorithm, policy, hyperparameters, spaces, exploration noise, counters and
random-generator states; ``arrays.safetensors`` holds every network's weights (normalizer
statistics included: they are buffers of the encoder), the optimizers' states and the torch
generator's state. A loaded model rebuilds its networks from the spaces in the file, so it predicts
without an env (SB3 #2160).
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from herl.io.archive import ArchiveError, read_archive, write_archive
from herl.io.spaces import space_from_json, space_to_json

MODEL_KIND = "model"
MODEL_VERSION = 1
_JSON_TYPES = (str, int, float, bool, type(None))


def model_path(path: str | os.PathLike, *, reading: bool) -> Path:
    """Stable-Baselines' file names: ``save("name")`` writes ``name.zip`` (a path without a suffix gets one),
    and ``load("name")`` reads ``name.zip`` when there is no file ``name``."""
    path = Path(path)
    if reading:
        with_zip = Path(f"{path}.zip")
        return with_zip if not path.is_file() and with_zip.is_file() else path
    return path.with_name(path.name + ".zip") if path.suffix == "" else path


def write_model(model: Any, path: str | os.PathLike) -> None:
    """Write ``model`` (a herl off-policy algorithm) to ``path`` (``.zip`` appended when it has no suffix)."""
    path = model_path(path, reading=False)
    arrays: dict[str, np.ndarray] = {}
    for name, module in model.nets.items():
        for key, tensor in module.state_dict().items():
            arrays[f"nets/{name}/{key}"] = tensor.detach().cpu().numpy()
    optimizers = {}
    for name, optimizer in model.optimizers.items():
        state = optimizer.state_dict()
        for index, param_state in state["state"].items():
            for key, value in param_state.items():
                arrays[f"optim/{name}/{index}/{key}"] = torch.as_tensor(value).detach().cpu().numpy()
        optimizers[name] = [_jsonable_kwargs(group) for group in state["param_groups"]]
    arrays["torch_rng"] = model.torch_rng.get_state().numpy()  # a CPU and a CUDA generator's states differ in form
    noise = model.action_noise
    meta = {
        "algorithm": type(model).__name__,
        "policy": model.policy_name,
        "config": model.config.to_json(),
        "policy_kwargs": model.policy_config.to_policy_kwargs(),
        "observation_space": space_to_json(model.observation_space),
        "action_space": space_to_json(model.action_space),
        "action_noise": None if noise is None else noise.to_json(),
        "replay_buffer_class": model.replay_buffer_class.__name__,
        # callables (compute_reward) are code, not data: pass them again on load with replay_buffer_kwargs=
        "replay_buffer_kwargs": _jsonable_kwargs(model.replay_buffer_kwargs),
        "seed": model.seed,
        "counters": {"num_timesteps": model.num_timesteps, "n_updates": model._n_updates, "episode_num": model._episode_num},
        "optimizers": optimizers,
        "rng_state": model.rng.bit_generator.state,
        "torch_rng_device": model.device.type,
    }
    write_archive(path, kind=MODEL_KIND, version=MODEL_VERSION, meta=meta, arrays=arrays)


def _jsonable_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The entries that are data (enums by name, tuples as lists); callables such as compute_reward are code, left out."""
    out = {}
    for key, value in kwargs.items():
        if isinstance(value, enum.Enum):
            out[key] = value.name.lower()
        elif isinstance(value, _JSON_TYPES) or (isinstance(value, (list, tuple)) and all(isinstance(v, _JSON_TYPES) for v in value)):
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def read_model(path: str | os.PathLike, expected: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(meta, parameters)`` of a model file, parameters in :meth:`get_parameters`' form."""
    path = model_path(path, reading=True)
    meta, arrays = read_archive(path, kind=MODEL_KIND, max_version=MODEL_VERSION)
    algorithm = meta.get("algorithm")
    if expected is not None and algorithm != expected:
        raise ArchiveError(f"{path} holds a {algorithm} model, not a {expected}: load it with {algorithm}.load")
    try:
        params: dict[str, Any] = {}
        optim_states: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
        for key, array in arrays.items():
            kind, _, rest = key.partition("/")
            if kind == "nets":
                name, _, param = rest.partition("/")
                params.setdefault(name, {})[param] = torch.from_numpy(array)
            elif kind == "optim":
                name, index, field = rest.split("/", 2)
                optim_states.setdefault(name, {}).setdefault(int(index), {})[field] = torch.from_numpy(array)
        for name, groups in meta["optimizers"].items():
            params[f"{name}.optimizer"] = {"state": optim_states.get(name, {}), "param_groups": groups}
    except (KeyError, ValueError) as err:
        raise ArchiveError(f"{path}: a damaged model file ({type(err).__name__}: {err})") from err
    return meta, params


def load_model(cls: type, path: str | os.PathLike, *, env: Any, device: Any, overrides: dict[str, Any],
               custom_objects: Mapping[str, Any] | None = None) -> Any:
    """Rebuild the model saved at ``path`` as ``cls`` (or, for the base class, as the saved algorithm).

    ``overrides`` must be hyperparameters of the model; ``custom_objects`` (SB3's) replaces only what
    the file holds and ignores the rest, as SB3 does: rl-zoo passes ``lr_schedule``, ``clip_range`` or
    ``exploration_schedule`` for any algorithm. herl files hold numbers, never code, so a schedule (or
    the ``learning_rate=0.0`` that rl-zoo passes with it) has nothing to stand in for: the saved
    learning rate is kept.
    """
    from herl.algorithms import ALGORITHMS
    from herl.buffers import HerReplayBuffer, ReplayBuffer
    from herl.training.noise import noise_from_json

    path = model_path(path, reading=True)
    meta, arrays = read_archive(path, kind=MODEL_KIND, max_version=MODEL_VERSION)
    algorithm = meta.get("algorithm")
    if cls.__name__ not in ALGORITHMS:  # OffPolicyAlgorithm.load: whichever algorithm the file holds
        if algorithm not in ALGORITHMS:
            raise ArchiveError(f"{path} holds an unknown algorithm {algorithm!r}")
        cls = ALGORITHMS[algorithm]
    _, params = read_model(path, expected=cls.__name__)
    buffers = {"HerReplayBuffer": HerReplayBuffer, "ReplayBuffer": ReplayBuffer}
    try:
        obs_space, act_space = space_from_json(meta["observation_space"]), space_from_json(meta["action_space"])
        kwargs: dict[str, Any] = {
            **meta["config"],
            "policy_kwargs": meta["policy_kwargs"],
            "action_noise": noise_from_json(meta["action_noise"]),
            "replay_buffer_class": buffers.get(meta["replay_buffer_class"], ReplayBuffer),
            "replay_buffer_kwargs": meta["replay_buffer_kwargs"],
            "seed": meta["seed"],
        }
        counters = meta["counters"]
    except (KeyError, TypeError, ValueError) as err:
        raise ArchiveError(f"{path}: a damaged model file ({type(err).__name__}: {err})") from err
    for key, value in (custom_objects or {}).items():
        if key in kwargs and not (key == "learning_rate" and (callable(value) or not value)):
            kwargs[key] = value
    kwargs.update(overrides)
    model = cls(meta["policy"], env, observation_space=obs_space, action_space=act_space, device=device, **kwargs)
    if model.observation_space != obs_space or model.action_space != act_space:
        raise ValueError(
            f"the env's spaces differ from the saved model's: observation {model.observation_space} vs {obs_space}, "
            f"action {model.action_space} vs {act_space}"
        )
    model.set_parameters(params, exact_match=True)
    model.num_timesteps = counters["num_timesteps"]
    model._n_updates = counters["n_updates"]
    model._episode_num = counters["episode_num"]
    model.rng.bit_generator.state = meta["rng_state"]
    if meta.get("torch_rng_device") == model.device.type:  # else the generator keeps its fresh seeded state
        model.torch_rng.set_state(torch.from_numpy(arrays["torch_rng"].copy()))
    return model
