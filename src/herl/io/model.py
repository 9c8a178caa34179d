"""Model files: a herl archive (zip of JSON + safetensors, see :mod:`herl.io.archive`), never pickle.

``meta.json`` holds the algorithm, policy, hyperparameters, spaces, exploration noise, counters and
random-generator states; ``arrays.safetensors`` holds every network's weights (normalizer
statistics included: they are buffers of the encoder), the optimizers' states and the torch
generator's state. A loaded model rebuilds its networks from the spaces in the file, so it predicts
without an env (SB3 #2160).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from herl.io.archive import ArchiveError, generator_state, read_archive, write_archive
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
    """The entries that are data (enums by name, tuples as lists, paths as text, such as a dataset of demonstrations);
    callables such as compute_reward are code, and in-memory demonstrations are data too large for the file: both
    are left out (pass them again on load with replay_buffer_kwargs=)."""
    out = {}
    for key, value in kwargs.items():
        if isinstance(value, enum.Enum):
            out[key] = value.name.lower()
        elif isinstance(value, os.PathLike):
            out[key] = os.fspath(value)
        elif isinstance(value, _JSON_TYPES) or (isinstance(value, (list, tuple)) and all(isinstance(v, _JSON_TYPES) for v in value)):
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def read_model(path: str | os.PathLike, expected: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(meta, parameters)`` of a model file, parameters in :meth:`get_parameters`' form."""
    path = model_path(path, reading=True)
    meta, arrays = read_archive(path, kind=MODEL_KIND, max_version=MODEL_VERSION)
    algorithm = _field(meta, "algorithm", str)
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
        for name, groups in _field(meta, "optimizers", dict).items():
            params[f"{name}.optimizer"] = {"state": optim_states.get(name, {}), "param_groups": groups}
    except (KeyError, ValueError, TypeError) as err:
        if isinstance(err, ArchiveError):
            raise
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

    Everything read from the file is checked before it is used, and a file that fails a check is refused with an
    :class:`~herl.errors.ArchiveError` naming the field (issue 10); only the algorithm's hyperparameters are taken
    from it (a file cannot set ``tensorboard_log`` or ``verbose``, which say where and what training writes).
    """
    from herl.algorithms import ALGORITHMS
    from herl.buffers import HerReplayBuffer, ReplayBuffer
    from herl.training.noise import noise_from_json

    path = model_path(path, reading=True)
    meta, arrays = read_archive(path, kind=MODEL_KIND, max_version=MODEL_VERSION)
    algorithm = _field(meta, "algorithm", str)
    if cls.__name__ not in ALGORITHMS:  # OffPolicyAlgorithm.load: whichever algorithm the file holds
        if algorithm not in ALGORITHMS:
            raise ArchiveError(f"{path} holds an unknown algorithm {algorithm!r}: herl knows {sorted(ALGORITHMS)}")
        cls = ALGORITHMS[algorithm]
    _, params = read_model(path, expected=cls.__name__)
    buffers = {"HerReplayBuffer": HerReplayBuffer, "ReplayBuffer": ReplayBuffer}
    try:
        config = cls.config_class.with_former_defaults(_field(meta, "config", dict))
        unknown = sorted(set(config) - {f.name for f in dataclasses.fields(cls.config_class)})
        if unknown:
            raise ArchiveError(f"{path}: its config holds {unknown}, which are not {cls.__name__} hyperparameters "
                               "(settings such as tensorboard_log or verbose are never taken from a file)")
        cls.config_class.from_kwargs(config)  # the file's own values, checked before the user's overrides
        obs_space, act_space = space_from_json(meta["observation_space"]), space_from_json(meta["action_space"])
        kwargs: dict[str, Any] = {
            **config,
            "policy_kwargs": _field(meta, "policy_kwargs", dict),
            "action_noise": noise_from_json(_field(meta, "action_noise", (dict, type(None)))),
            "replay_buffer_class": buffers.get(meta.get("replay_buffer_class"), ReplayBuffer),
            "replay_buffer_kwargs": _field(meta, "replay_buffer_kwargs", dict),
            "seed": meta.get("seed"),
        }
        counters = _field(meta, "counters", dict)
        counts = [counters.get(k) for k in ("num_timesteps", "n_updates", "episode_num")]
        if not all(type(c) is int and c >= 0 for c in counts):
            raise ArchiveError(f"{path}: its counters must be whole numbers >= 0, got {counters!r}")
        policy = _field(meta, "policy", str)
        rng_state = generator_state(path, meta)
        _check_size(path, cls, kwargs["policy_kwargs"], obs_space, act_space, params)
        model = cls(policy, None, observation_space=obs_space, action_space=act_space, device=device, **kwargs)
    except ArchiveError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise ArchiveError(f"{path}: a damaged model file ({type(err).__name__}: {err})") from err
    try:
        _check_param_groups(model, params)
        model.set_parameters(params, exact_match=True)
        _check_optimizer_states(model)
        model.rng.bit_generator.state = rng_state
        if meta.get("torch_rng_device") == model.device.type and "torch_rng" in arrays:  # else a fresh seeded state
            model.torch_rng.set_state(torch.from_numpy(arrays["torch_rng"].copy()).to(torch.uint8))
    except ArchiveError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, OverflowError) as err:
        raise ArchiveError(f"{path}: its weights or optimizer states do not fit a {cls.__name__} with the saved "
                           f"settings ({type(err).__name__}: {err})") from err
    bad = [name for name, module in model.nets.items()
           if not all(bool(torch.isfinite(t).all()) for t in [*module.parameters(), *module.buffers()]
                      if t.is_floating_point())]
    if bad:
        warnings.warn(f"{path}: the weights of {bad} hold NaN or infinity; its predictions will be NaN and training "
                      "from it will stop at the first update", stacklevel=3)
    # the file is sound: now the user's env and overrides
    overrides = {**{k: v for k, v in (custom_objects or {}).items()
                    if k in kwargs and not (k == "learning_rate" and (callable(v) or not v))}, **overrides}
    if env is not None or overrides:
        model = _with_env(model, cls, policy, env, device, kwargs, overrides, obs_space, act_space, params)
    model.num_timesteps, model._n_updates, model._episode_num = counts
    if env is not None or overrides:
        model.rng.bit_generator.state = rng_state
        if meta.get("torch_rng_device") == model.device.type and "torch_rng" in arrays:
            model.torch_rng.set_state(torch.from_numpy(arrays["torch_rng"].copy()).to(torch.uint8))
    return model


def _with_env(model: Any, cls: type, policy: str, env: Any, device: Any, kwargs: dict[str, Any],
              overrides: dict[str, Any], obs_space: Any, act_space: Any, params: dict[str, Any]) -> Any:
    """The checked model rebuilt on the user's env with the user's overrides (their errors are theirs, not the
    file's, so they pass through unchanged)."""
    model = cls(policy, env, observation_space=obs_space, action_space=act_space, device=device,
                **{**kwargs, **overrides})
    if model.observation_space != obs_space or model.action_space != act_space:
        raise ValueError(
            f"the env's spaces differ from the saved model's: observation {model.observation_space} vs {obs_space}, "
            f"action {model.action_space} vs {act_space}"
        )
    model.set_parameters(params, exact_match=True)
    return model


def _check_size(path: Any, cls: type, policy_kwargs: dict[str, Any], obs_space: Any, act_space: Any,
                params: dict[str, Any]) -> None:
    """Refuse network settings that imply more weights than the file holds, before building them (a file asking for
    a layer of 2**40 units would otherwise allocate terabytes)."""
    from gymnasium import spaces

    from herl.training.config import PolicyConfig

    arch = PolicyConfig.from_kwargs(policy_kwargs, cls.default_net_arch, cls.default_n_critics, cls.policy_options)
    subspaces = obs_space.spaces.values() if isinstance(obs_space, spaces.Dict) else [obs_space]
    inputs = sum(int(np.prod(s.shape)) if s.shape else 1 for s in subspaces)
    stored = sum(t.numel() for name, state in params.items() if not name.endswith(".optimizer")
                 for t in state.values())
    # every layer's weights are among the stored ones (target networks double them, which covers the inputs counted
    # here that the networks do not read, such as achieved_goal)
    layers = [a * b for hidden in (arch.actor_arch, arch.critic_arch) for a, b in zip([inputs, *hidden], hidden)]
    implied = max([*layers, arch.n_critics * (arch.critic_arch[0] if arch.critic_arch else 1)])
    if implied > stored:
        raise ArchiveError(f"{path}: its network settings ({policy_kwargs}) imply a layer of {implied:,} weights, but "
                           f"it holds {stored:,} in all: the file is damaged")


def _field(meta: dict[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    if name not in meta:
        raise ArchiveError(f"the model file lacks its {name!r} field: the file is damaged or not a herl model")
    value = meta[name]
    if not isinstance(value, types):
        raise ArchiveError(f"the model file's {name!r} field is a {type(value).__name__}: the file is damaged")
    return value


def _check_param_groups(model: Any, params: dict[str, Any]) -> None:
    """The optimizers' hyperparameters in the file have the types and counts of a fresh optimizer's (a string ``lr``
    would only fail at the first update)."""
    for name, optimizer in model.optimizers.items():
        saved = params.get(f"{name}.optimizer")
        if saved is None:
            continue
        fresh_groups, groups = optimizer.state_dict()["param_groups"], saved["param_groups"]
        if not isinstance(groups, list) or len(groups) != len(fresh_groups):
            raise ArchiveError(f"optimizer {name!r} has {len(groups) if isinstance(groups, list) else groups!r} "
                               f"parameter groups in the file, {len(fresh_groups)} in the model")
        for fresh, group in zip(fresh_groups, groups):
            if not isinstance(group, dict) or set(group) != set(fresh) or group["params"] != fresh["params"]:
                raise ArchiveError(f"optimizer {name!r}'s settings in the file do not match the model's")
            for key, value in group.items():
                if key != "params" and not _same_kind(fresh[key], value):
                    raise ArchiveError(f"optimizer {name!r}'s {key}={value!r} in the file is not a valid value")


def _same_kind(fresh: Any, value: Any) -> bool:
    if isinstance(fresh, bool) or fresh is None:
        return isinstance(value, bool) or value is None
    if isinstance(fresh, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if isinstance(fresh, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(fresh) and all(
            _same_kind(f, v) for f, v in zip(fresh, value))
    return type(value) is type(fresh)


def _check_optimizer_states(model: Any) -> None:
    """Each per-parameter state tensor (Adam's moments) has its parameter's shape; ``step`` is one number."""
    for name, optimizer in model.optimizers.items():
        for group in optimizer.param_groups:
            for param in group["params"]:
                for key, value in optimizer.state.get(param, {}).items():
                    if key == "step":
                        if torch.as_tensor(value).numel() != 1:
                            raise ArchiveError(f"optimizer {name!r}'s step count is not one number")
                    elif torch.is_tensor(value) and value.shape != param.shape and not value.numel() == param.numel() == 1:
                        raise ArchiveError(f"optimizer {name!r}'s {key} has shape {tuple(value.shape)} for a "
                                           f"parameter of shape {tuple(param.shape)}")
