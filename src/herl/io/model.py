"""Model files: a herl archive (zip of JSON + safetensors, see :mod:`herl.io.archive`), never pickle.

``meta.json`` holds the algorithm, policy, hyperparameters, spaces, exploration noise, counters and
random-generator states; ``arrays.safetensors`` holds every network's weights (normalizer
statistics included: they are buffers of the encoder), the optimizers' states and the torch
generator's state. A loaded model rebuilds its networks from the spaces in the file, so it predicts
without an env (SB3 #2160).

The file names its classes (the algorithm, the replay buffer, the exploration noise); this module, below them,
never imports them: the layer that loads (:meth:`herl.training.base.OffPolicyAlgorithm.load`) passes a
:class:`ModelClasses` that resolves the names.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from herl.errors import ClassNotLoadedError
from herl.io.archive import ArchiveError, generator_state, is_stream, read_archive, write_archive
from herl.io.spaces import space_from_json, space_to_json
from herl.utils import is_herls, loaded_class

MODEL_KIND = "model"
MODEL_VERSION = 1
_JSON_TYPES = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class ModelClasses:
    """What the names in a model file stand for, given by the layer that loads it."""

    algorithms: Mapping[str, type]
    """herl's algorithms by name: a file loaded through their base class becomes the algorithm it names."""
    buffers: Mapping[str, type]
    """Replay buffer classes by name; a file naming none of them gets ``buffers["ReplayBuffer"]``."""
    action_noise: Callable[[dict[str, Any] | None], Any]
    """The exploration noise from its JSON form (None: no noise)."""
    policy_config: Callable[[type, dict[str, Any]], Any]
    """``(algorithm class, policy_kwargs)`` to the network settings (``actor_arch``, ``critic_arch``, ``n_critics``)
    that the file's weights must cover."""


def model_path(path: str | os.PathLike | IO[bytes], *, reading: bool) -> Path | IO[bytes]:
    """Stable-Baselines' file names: ``save("name")`` writes ``name.zip`` (a path without a suffix gets one),
    and ``load("name")`` reads ``name.zip`` when there is no file ``name``.

    A file object (``open(path, "rb")``, ``io.BytesIO``; SB3 takes them too) is returned as it is, except that one
    read from that cannot seek is read into memory: loading reads the file more than once.
    """
    if is_stream(path):
        if reading and hasattr(path, "read") and not getattr(path, "seekable", lambda: False)():
            return io.BytesIO(path.read())
        return path
    path = Path(path)
    if reading:
        with_zip = Path(f"{path}.zip")
        return with_zip if not path.is_file() and with_zip.is_file() else path
    return path.with_name(path.name + ".zip") if path.suffix == "" else path


def print_system_info(path: str | os.PathLike | IO[bytes]) -> None:
    """Print the versions of this system and of the one that saved the model at ``path`` (SB3's ``load(...,
    print_system_info=True)``): when a loaded model acts differently, they say what changed. Files written before
    herl recorded them hold only herl's version. A file that cannot be read prints why, and loading it then raises
    the full error."""
    from herl.io.archive import describe, read_header, system_info

    print("== CURRENT SYSTEM INFO ==")
    for key, value in system_info().items():
        print(f"- {key}: {value}")
    print("== SAVED MODEL SYSTEM INFO ==")
    try:
        header = read_header(path)
    except (ArchiveError, OSError, TypeError) as err:
        print(f"(cannot read {describe(path)}: {err})")
        return
    saved = header.get("system_info")
    if not isinstance(saved, dict):
        saved = {"herl": header.get("herl_version", "unknown")}
        print("(saved by a herl that recorded only its own version)")
    for key, value in saved.items():
        if isinstance(value, (str, int, float)):  # what a damaged file holds there is not printed
            print(f"- {key}: {value}")


def write_model(model: Any, path: str | os.PathLike, *, verbose: bool = True) -> None:
    """Write ``model`` (a herl off-policy algorithm) to ``path`` (``.zip`` appended when it has no suffix); ``verbose``:
    whether the file keeps the model's verbosity (SB3 keeps it unless ``save(..., exclude=["verbose"])``)."""
    path = model_path(path, reading=False)
    arrays: dict[str, np.ndarray] = {}
    for name, module in model.nets.items():
        for key, tensor in module.state_dict().items():
            arrays[f"nets/{name}/{key}"] = tensor.detach().cpu().numpy()
    optimizers = {}
    numbers = []  # state entries the optimizer keeps as Python numbers (torch < 2.4's RMSprop step counts)
    assigned = dict(model._assigned_optimizers)  # a user's own optimizer: its state fits no optimizer a file rebuilds
    for name, optimizer in model.optimizers.items():
        if name in assigned:
            continue
        state = optimizer.state_dict()
        for index, param_state in state["state"].items():
            for key, value in param_state.items():
                if value is None:  # torch < 2.4's SGD without momentum keeps momentum_buffer=None: nothing to keep
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    numbers.append(f"{name}/{index}/{key}")
                arrays[f"optim/{name}/{index}/{key}"] = torch.as_tensor(value).detach().cpu().numpy()
        optimizers[name] = [_jsonable_kwargs(group) for group in state["param_groups"]]
    # every network by name, those without weights or statistics too (an encoder that does not normalize): the
    # file's layout is the model's, and a reader need not guess which networks an empty entry would have named
    nets = list(model.nets)
    if model._last_obs is not None:  # where the envs were, for load(..., env=the same envs, force_reset=False)
        arrays.update(loop_arrays(model))
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
        "replay_buffer_class": buffer_class_name(model.replay_buffer_class),
        # callables (compute_reward) are code, not data: pass them again on load with replay_buffer_kwargs=
        "replay_buffer_kwargs": _jsonable_kwargs(model.replay_buffer_kwargs),
        "seed": model.seed,
        "counters": {"num_timesteps": model.num_timesteps, "n_updates": model._n_updates, "episode_num": model._episode_num},
        "nets": nets,
        **({"verbose": int(model.verbose)} if verbose else {}),
        "optimizers": optimizers,
        **({"optimizer_numbers": numbers} if numbers else {}),
        **({"assigned_optimizers": assigned} if assigned else {}),
        "training_state": {name: getattr(model, name) for name in model.saved_state},
        # the exploration noise's generator and, for Ornstein-Uhlenbeck, its running value: with them a loaded DDPG or
        # TD3 explores on as the saved one would
        "action_noise_state": None if noise is None else {
            "rng_state": noise.rng.bit_generator.state,
            "noise_prev": np.asarray(getattr(noise, "noise_prev", [])).tolist()},
        "rng_state": model.rng.bit_generator.state,
        "torch_rng_device": model.device.type,
    }
    write_archive(path, kind=MODEL_KIND, version=MODEL_VERSION, meta=meta, arrays=arrays)


def buffer_class_name(cls: type) -> str:
    """How a model file names its replay buffer class: herl's by its name, a subclass of the user's as
    ``module:qualname`` (found again among the modules the loading process has imported, see :func:`_buffer_class`)."""
    return cls.__name__ if is_herls(cls) else f"{cls.__module__}:{cls.__qualname__}"


def _buffer_class(name: Any, classes: ModelClasses, given: Any) -> type:
    """The replay buffer class a model file names: herl's, or a subclass of the user's already imported; else the
    class passed to ``load`` as ``replay_buffer_class`` stands in for it, and without one, a class that keeps the
    name and refuses to be built (:func:`_not_loaded_buffer_class`). Never ``ReplayBuffer`` in its place, which would
    train a HER model on without HER."""
    base = classes.buffers["ReplayBuffer"]
    if name is None:  # files from before the field
        return base
    if not isinstance(name, str) or not name:
        raise ArchiveError(f"its replay_buffer_class must be a class's name, got {name!r}")
    if name in classes.buffers:
        return classes.buffers[name]
    found = loaded_class(name, base) if ":" in name else None
    if found is not None:
        return found
    if isinstance(given, type) and issubclass(given, base):
        return given
    return _not_loaded_buffer_class(name, base)


def _not_loaded_buffer_class(name: str, base: type) -> type:
    """A stand-in for the user's buffer class ``name`` that this process has not imported: the model it is given to
    predicts, evaluates and saves under the same name, and building its buffer (``learn``, ``set_env``, ``load`` with
    an env) raises a :class:`ClassNotLoadedError` that names the fix."""
    module, _, qualname = name.rpartition(":") if ":" in name else (__name__, "", name)
    where = module if ":" in name else "the module that defines it"
    message = (f"the replay buffer class {name!r} is not loaded: import its module ({where}) before loading the "
               "model, or pass replay_buffer_class=TheClass to load "
               "(model files hold no code, so herl does not import it for you); the model predicts without it, but "
               "its buffer cannot be built")

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ClassNotLoadedError(message)

    return type(qualname.rpartition(".")[2], (base,), {"__init__": refuse, "__module__": module,
                                                        "__qualname__": qualname, "__doc__": message})


PRIORITY_SETTINGS = ("prioritized", "alpha", "beta", "priority_eps")


def _without_unused_priorities(cls: type, settings: dict[str, Any], path: Any) -> dict[str, Any]:
    """A file of an algorithm that does not update priorities, saved with ``prioritized=True`` before it was refused
    (its batches were drawn uniformly, all priorities equal): loaded without the priority settings, with a note."""
    if not settings.get("prioritized") or getattr(cls, "updates_priorities", True):
        return settings
    warnings.warn(f"{path}: its replay_buffer_kwargs hold prioritized=True, which {cls.__name__} never used (it feeds "
                  "back no priorities, so every transition kept the same); loaded without it", UserWarning,
                  stacklevel=4)
    return {key: value for key, value in settings.items() if key not in PRIORITY_SETTINGS}


_NOT_DATA = object()


def _json_value(value: Any) -> Any:
    """``value`` as a model file keeps it (enums by name, paths as text, NumPy numbers and arrays as Python's, tuples
    as lists), or ``_NOT_DATA`` for what a file cannot hold (code, objects)."""
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic) and value.dtype.kind in "biufU":
        value = value.item()
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biufU" and value.ndim == 1:
        value = value.tolist()
    if isinstance(value, _JSON_TYPES):
        return value
    if isinstance(value, (list, tuple)):
        items = [_json_value(v) for v in value]
        return _NOT_DATA if any(v is _NOT_DATA or isinstance(v, list) for v in items) else items
    return _NOT_DATA


def _jsonable_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The entries that are data (see :func:`_json_value`); callables such as compute_reward are code, and
    in-memory demonstrations are data too large for the file: both are left out (pass them again on load with
    replay_buffer_kwargs=; saving says so, see :func:`unsaved_kwargs`)."""
    out = {}
    for key, value in kwargs.items():
        converted = _json_value(value)
        if converted is not _NOT_DATA:
            out[key] = converted
    return out


def unsaved_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """The names of the entries a model file leaves out of ``kwargs`` (code, objects), but those herl gives again
    itself on load (a value whose ``rebuilt_on_load`` is true)."""
    return [key for key, value in kwargs.items()
            if _json_value(value) is _NOT_DATA and not getattr(value, "rebuilt_on_load", False)]


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
        # a network without state (an encoder that does not normalize) has no arrays: its entry is empty. Files written
        # before the "nets" field lack such entries; set_parameters needs none for a network without state.
        nets = meta.get("nets", [])
        if not isinstance(nets, list) or not all(isinstance(name, str) for name in nets):
            raise ArchiveError(f"{path}: its 'nets' field must be a list of network names, got {nets!r}")
        for name in nets:
            params.setdefault(name, {})
        numbers = meta.get("optimizer_numbers", [])
        if not isinstance(numbers, list) or not all(isinstance(n, str) and n.count("/") == 2 for n in numbers):
            raise ArchiveError(f"{path}: its 'optimizer_numbers' field is damaged: {numbers!r}")
        for entry in numbers:  # Python numbers where the optimizer kept them, as it keeps them
            name, index, field = entry.split("/")
            value = optim_states.get(name, {}).get(int(index), {}).get(field)
            if value is None or value.numel() != 1:
                raise ArchiveError(f"{path}: its 'optimizer_numbers' field names {entry!r}, which holds no number")
            optim_states[name][int(index)][field] = value.item()
        for name, groups in _field(meta, "optimizers", dict).items():
            params[f"{name}.optimizer"] = {"state": optim_states.get(name, {}), "param_groups": groups}
    except (KeyError, ValueError, TypeError) as err:
        if isinstance(err, ArchiveError):
            raise
        raise ArchiveError(f"{path}: a damaged model file ({type(err).__name__}: {err})") from err
    return meta, params


def load_model(cls: type, path: str | os.PathLike, *, env: Any, device: Any, overrides: dict[str, Any],
               classes: ModelClasses, custom_objects: Mapping[str, Any] | None = None, force_reset: bool = True) -> Any:
    """Rebuild the model saved at ``path`` as ``cls`` (or, for the base class, as the saved algorithm); ``classes``
    resolves the names the file holds.

    ``overrides`` must be hyperparameters of the model; ``custom_objects`` (SB3's) replaces only what
    the file holds and ignores the rest, as SB3 does: rl-zoo passes ``lr_schedule``, ``clip_range`` or
    ``exploration_schedule`` for any algorithm. herl files hold numbers, never code, so a schedule (or
    the ``learning_rate=0.0`` that rl-zoo passes with it) has nothing to stand in for: the saved
    learning rate is kept.

    Everything read from the file is checked before it is used, and a file that fails a check is refused with an
    :class:`~herl.errors.ArchiveError` naming the field; only the algorithm's hyperparameters are taken
    from it (a file cannot set ``tensorboard_log``, which says where training writes), and the verbosity (0, 1 or 2)
    the model was saved with, as SB3 keeps it.
    """
    from herl.utils import get_device

    device = get_device(device, stacklevel=4)  # the caller's argument, checked before the file: its errors are its own
    path = model_path(path, reading=True)
    meta, arrays = read_archive(path, kind=MODEL_KIND, max_version=MODEL_VERSION)
    algorithm = _field(meta, "algorithm", str)
    algorithms = classes.algorithms
    if cls.__name__ not in algorithms:  # OffPolicyAlgorithm.load: whichever algorithm the file holds
        if algorithm not in algorithms:
            raise ArchiveError(f"{path} holds an unknown algorithm {algorithm!r}: herl knows {sorted(algorithms)}")
        cls = algorithms[algorithm]
    _, params = read_model(path, expected=cls.__name__)
    try:
        config = cls.config_class.with_former_defaults(_field(meta, "config", dict))
        unknown = sorted(set(config) - {f.name for f in dataclasses.fields(cls.config_class)})
        if unknown:
            raise ArchiveError(f"{path}: its config holds {unknown}, which are not {cls.__name__} hyperparameters "
                               "(settings such as tensorboard_log or verbose are never taken from a file)")
        cls.config_class.from_kwargs(config)  # the file's own values, checked before the user's overrides
        obs_space, act_space = space_from_json(meta["observation_space"]), space_from_json(meta["action_space"])
        buffer_class = _buffer_class(meta.get("replay_buffer_class"), classes, overrides.get("replay_buffer_class"))
        kwargs: dict[str, Any] = {
            **config,
            # files from before features extractors read the flat inputs; from before input_keys, a goal env's
            # observation and desired goal
            "policy_kwargs": {"features_extractor_class": None, "input_keys": _former_input_keys(obs_space),
                              **_field(meta, "policy_kwargs", dict)},
            "action_noise": classes.action_noise(_field(meta, "action_noise", (dict, type(None)))),
            "replay_buffer_class": buffer_class,
            # settings the buffer no longer has are left out, with a note (HerReplayBuffer.settings_from_file)
            "replay_buffer_kwargs": _without_unused_priorities(
                cls, buffer_class.settings_from_file(_field(meta, "replay_buffer_kwargs", dict), f"the model file {path}"),
                path),
            "seed": meta.get("seed"),
        }
        counters = _field(meta, "counters", dict)
        counts = [counters.get(k) for k in ("num_timesteps", "n_updates", "episode_num")]
        if not all(type(c) is int and c >= 0 for c in counts):
            raise ArchiveError(f"{path}: its counters must be whole numbers >= 0, got {counters!r}")
        policy = _field(meta, "policy", str)
        rng_state = generator_state(path, meta)
        _check_size(path, classes.policy_config(cls, kwargs["policy_kwargs"]), kwargs["policy_kwargs"], obs_space,
                    params)
        model = cls(policy, None, observation_space=obs_space, action_space=act_space, device=device, **kwargs)
    except ArchiveError:
        raise
    except ClassNotLoadedError as err:  # a sound file naming a class of the user's that this process lacks
        raise ArchiveError(f"{path}: {err}") from None
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise ArchiveError(f"{path}: a damaged model file ({type(err).__name__}: {err})") from err
    try:
        for name, optimizer in model.optimizers.items():
            saved = params.get(f"{name}.optimizer")
            if saved is not None:
                try:
                    saved["param_groups"] = fit_param_groups(saved["param_groups"],
                                                             optimizer.state_dict()["param_groups"])
                except ValueError as err:
                    raise ArchiveError(f"{path}: {err}") from None
        _check_param_groups(model, params)
        _start_assigned_optimizers_anew(path, model, meta, params)
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
    if isinstance(overrides.get("policy_kwargs"), Mapping):  # the entries given replace the file's, the rest stay
        overrides["policy_kwargs"] = {**kwargs["policy_kwargs"], **overrides["policy_kwargs"]}
    if isinstance(overrides.get("replay_buffer_kwargs"), Mapping) and overrides.get(
            "replay_buffer_class", kwargs["replay_buffer_class"]) is kwargs["replay_buffer_class"]:
        # the same: compute_reward passed again keeps the saved n_sampled_goal and strategy
        overrides["replay_buffer_kwargs"] = {**kwargs["replay_buffer_kwargs"], **overrides["replay_buffer_kwargs"]}
    if env is not None or overrides:
        model = _with_env(model, cls, policy, env, device, kwargs, overrides, obs_space, act_space, params)
    model.num_timesteps, model._n_updates, model._episode_num = counts
    _restore_training_state(path, model, meta)
    if env is not None and not force_reset:
        _restore_last_observations(path, model, arrays)
    if "verbose" in meta and "verbose" not in overrides:  # what the model prints while training: 0, 1 or 2 (never where it writes)
        if meta["verbose"] not in (0, 1, 2) or isinstance(meta["verbose"], bool):
            raise ArchiveError(f"{path}: its verbose={meta['verbose']!r} is not 0, 1 or 2: the file is damaged")
        model.verbose = meta["verbose"]
    if env is not None or overrides:
        model.rng.bit_generator.state = rng_state
        if meta.get("torch_rng_device") == model.device.type and "torch_rng" in arrays:
            model.torch_rng.set_state(torch.from_numpy(arrays["torch_rng"].copy()).to(torch.uint8))
    return model


LAST_OBS = "loop/last_obs/"


def loop_arrays(model: Any) -> dict[str, np.ndarray]:
    """The loop's place in its envs: the observations to act from next and the running episodes' returns and
    lengths (a model file keeps them; a checkpoint's training state too)."""
    obs = model._last_obs
    arrays = {f"{LAST_OBS}{key}": np.asarray(value)
              for key, value in (obs.items() if isinstance(obs, Mapping) else [("", obs)])}
    arrays["loop/ep_returns"] = np.asarray(model._ep_returns, dtype=np.float64)
    arrays["loop/ep_lengths"] = np.asarray(model._ep_lengths, dtype=np.int64)
    return arrays


def saved_last_obs(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The observations :func:`loop_arrays` wrote, by observation key ("" for a Box space)."""
    return {k[len(LAST_OBS):]: v for k, v in arrays.items() if k.startswith(LAST_OBS)}


def _restore_last_observations(path: Path, model: Any, arrays: dict[str, np.ndarray]) -> None:
    """``load(..., env=envs, force_reset=False)`` (SB3's): go on from the observations the saved model would have acted
    on next, in ``envs`` as they are (the caller's promise that they kept their state); a file without them, or whose
    envs were more or fewer, resets as usual."""
    saved = saved_last_obs(arrays)
    returns, lengths = arrays.get("loop/ep_returns"), arrays.get("loop/ep_lengths")
    if not saved or returns is None or lengths is None or returns.shape != (model.n_envs,) \
            or lengths.shape != (model.n_envs,):
        return
    space = model.observation_space
    keys = set(space.spaces) if hasattr(space, "spaces") else {""}
    if set(saved) != keys or any(v.shape[:1] != (model.n_envs,) for v in saved.values()):
        raise ArchiveError(f"{path}: its last observations have keys {sorted(saved)} or a batch size that do not fit "
                           "the model: the file is damaged")
    model._last_obs = {k: v.copy() for k, v in saved.items()} if "" not in saved else saved[""].copy()
    model._ep_returns, model._ep_lengths = returns.astype(np.float64), lengths.astype(np.int64)
    model._env_was_seeded = True


def _restore_training_state(path: Path, model: Any, meta: dict[str, Any]) -> None:
    """The numbers of ``model.saved_state`` and the exploration noise's state, from a file that has them (files
    written before they were saved load with the defaults, as before)."""
    state = meta.get("training_state", {})
    if not isinstance(state, dict):
        raise ArchiveError(f"{path}: its 'training_state' field is a {type(state).__name__}: the file is damaged")
    for name in model.saved_state:
        if name not in state:
            continue
        value, kind = state[name], type(getattr(model, name))
        # the progress left goes below 0 when the last rollout passes the total (n_envs steps at once, a worker's
        # episode), as in SB3; a counter never does
        low = -math.inf if name == "_current_progress_remaining" else 0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low \
                or (kind is int and type(value) is not int):
            raise ArchiveError(f"{path}: its training state {name}={value!r} is not a "
                               f"{'finite number' if low else 'number >= 0'}: the file is damaged")
        setattr(model, name, kind(value))
    noise_state, noise = meta.get("action_noise_state"), model.action_noise
    if noise_state is None or noise is None:
        return
    try:
        rng = np.random.default_rng()
        rng.bit_generator.state = noise_state["rng_state"]
        noise.rng.bit_generator.state = rng.bit_generator.state
        if hasattr(noise, "noise_prev"):
            prev = np.asarray(noise_state["noise_prev"], dtype=np.float64)
            if (prev.shape != noise.mean.shape and prev.shape[1:] != noise.mean.shape) or not np.isfinite(prev).all():
                raise ValueError(f"noise_prev of shape {prev.shape} for noise of shape {noise.mean.shape}")
            noise.noise_prev = prev
    except (KeyError, TypeError, ValueError) as err:
        raise ArchiveError(f"{path}: its action noise state is damaged ({type(err).__name__}: {err})") from err


def _former_input_keys(observation_space: Any) -> list[str] | None:
    """What a model's networks read before ``input_keys`` was saved: a goal env's observation and desired goal,
    every key of another Dict space (a flat space has no keys to choose)."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Dict):
        return None
    keys = observation_space.spaces
    if all(k in keys for k in ("observation", "achieved_goal", "desired_goal")):
        return ["observation", "desired_goal"]
    return sorted(keys)


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


def _check_size(path: Any, arch: Any, policy_kwargs: dict[str, Any], obs_space: Any, params: dict[str, Any]) -> None:
    """Refuse network settings (``arch``, from the file's ``policy_kwargs``) that imply more weights than the file
    holds, before building them (a file asking for a layer of 2**40 units would otherwise allocate terabytes)."""
    from gymnasium import spaces

    subspaces = obs_space.spaces.values() if isinstance(obs_space, spaces.Dict) else [obs_space]
    inputs = sum(int(np.prod(s.shape)) if s.shape else 1 for s in subspaces)
    extractor_sizes = []
    if policy_kwargs.get("features_extractor_class") is not None:
        # the networks read the extractor's features: the file holds at least one weight per feature (its last
        # layer), so a size among the extractor's settings bounds them
        extractor_sizes = [v for v in (policy_kwargs.get("features_extractor_kwargs") or {}).values()
                           if isinstance(v, int) and not isinstance(v, bool)]
        inputs = 1
    stored = sum(t.numel() for name, state in params.items() if not name.endswith(".optimizer")
                 for t in state.values())
    # every layer's weights are among the stored ones (target networks double them, which covers the inputs counted
    # here that the networks do not read, such as achieved_goal)
    layers = [a * b for hidden in (arch.actor_arch, arch.critic_arch) for a, b in zip([inputs, *hidden], hidden)]
    implied = max([*layers, *extractor_sizes, arch.n_critics * (arch.critic_arch[0] if arch.critic_arch else 1)])
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


def _start_assigned_optimizers_anew(path: Any, model: Any, meta: dict[str, Any], params: dict[str, Any]) -> None:
    """A model saved with an optimizer its user assigned (``policy.optimizer``) holds no state for it: that optimizer
    is rebuilt as herl's and starts anew, with a warning (the weights load as saved)."""
    assigned = meta.get("assigned_optimizers", {})
    if not isinstance(assigned, dict) or not all(isinstance(v, str) and k in model.optimizers and k not in params
                                                 for k, v in assigned.items()):
        raise ArchiveError(f"{path}: its 'assigned_optimizers' field is damaged: {assigned!r}")
    for name, class_name in assigned.items():
        params[name + ".optimizer"] = model.optimizers[name].state_dict()
        warnings.warn(f"{path}: it was saved while training with an optimizer assigned by hand ({class_name}), which "
                      f"files never hold: its {name!r} is the model's own optimizer, started anew (the weights are "
                      "loaded as saved); assign yours again to train on with it", UserWarning, stacklevel=4)


OPTIMIZER_IMPLEMENTATION = frozenset({"fused", "foreach", "capturable", "differentiable"})
"""Entries of an optimizer's parameter groups that choose how this machine runs the step, not what it computes: a
loaded model keeps its own optimizer's (torch's ``load_state_dict`` would take the file's, and a fused Adam saved where
the device had the kernel failed at its first step where it has none: torch < 2.4 on a CPU)."""


def fit_param_groups(saved: Any, fresh: list[dict[str, Any]]) -> Any:
    """``saved`` parameter groups (a file's, or ``get_parameters()`` of another torch) fitted to ``fresh``, those of
    the model's own optimizer: the :data:`OPTIMIZER_IMPLEMENTATION` entries and the settings a newer torch added (at
    the defaults that keep an older torch's step) come from ``fresh``; a setting this torch lacks is dropped where it
    is off (``False`` or ``None``, what an older torch did) and refused (``ValueError``) where it is on; a JSON list
    where ``fresh`` has a tuple becomes the tuple. Groups that
    are not a list of dicts of ``fresh``'s count are returned as they are, for :func:`_check_param_groups`."""
    if not isinstance(saved, list) or len(saved) != len(fresh) or not all(isinstance(g, dict) for g in saved):
        return saved
    fitted = []
    for group, own in zip(saved, fresh):
        unknown = {k: v for k, v in group.items() if k not in own and v is not None and v is not False}
        if unknown:
            raise ValueError(f"its optimizer was saved with settings this torch ({torch.__version__}) does not have: "
                             f"{unknown}; load it where torch has them (a newer torch)")
        fitted.append({k: _as_fresh(group[k], v) if k in group and k not in OPTIMIZER_IMPLEMENTATION else v
                       for k, v in own.items()})
    return fitted


def _as_fresh(value: Any, fresh: Any) -> Any:
    """A JSON list where torch keeps a tuple (Adam's ``betas``) as the tuple, so the group equals a fresh one."""
    return tuple(value) if isinstance(fresh, tuple) and isinstance(value, list) else value


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
