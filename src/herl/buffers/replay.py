"""Plain experience replay on the episode storage, with the Stable-Baselines3 constructor and ``add``.

:class:`ReplayBuffer` is both the plain buffer herl's algorithms use without HER and the base of
:class:`~herl.buffers.her.HerReplayBuffer`, which only adds goal relabeling on top of it.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from herl.buffers.samples import DictReplayBufferSamples, ReplayBufferSamples
from herl.buffers.storage import EpisodeStorage, FieldSpec, GatheredRows, TorchEpisodeStorage, to_numpy
from herl.errors import BOOL, POSITIVE_INT, ArchiveError, HerlError, NonFiniteError, Rule, as_integer, check, number
from herl.utils import get_device, is_herls

_BOOL = np.dtype(bool)  # numpy's dtype objects of built-in types are singletons: `is` compares them


def _either(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """Logical or of two 0/1 float flag arrays."""
    return torch.maximum(a, b) if isinstance(a, torch.Tensor) else np.maximum(a, b)


def _column(values: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """Flags or rewards as a float32 (batch, 1) column, as SB3's batches have them."""
    if isinstance(values, torch.Tensor):
        return values.to(torch.float32).reshape(-1, 1)
    return values.astype(np.float32, copy=False).reshape(-1, 1)


def action_spec(action_space: spaces.Space) -> FieldSpec:
    """How an action is stored: Discrete as one integer (shape (1,), as SB3), others by their shape."""
    if isinstance(action_space, spaces.Discrete):
        return FieldSpec((1,), np.dtype(np.int64))
    if isinstance(action_space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        return FieldSpec(tuple(action_space.shape), np.dtype(action_space.dtype))
    raise TypeError(f"unsupported action space {action_space}: use Box, Discrete, MultiDiscrete or MultiBinary")


def state_specs(observation_space: spaces.Space) -> dict[str, FieldSpec]:
    """One stored field per observation key ("obs" for a flat observation)."""
    if isinstance(observation_space, spaces.Dict):
        return {k: _obs_spec(s, k) for k, s in observation_space.spaces.items()}
    return {"obs": _obs_spec(observation_space, "observation")}


def _obs_spec(space: spaces.Space, name: str) -> FieldSpec:
    if isinstance(space, spaces.Discrete):
        return FieldSpec((1,), np.dtype(np.int64))
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return FieldSpec(tuple(space.shape), np.dtype(space.dtype))
    raise TypeError(f"unsupported space for {name!r}: {space} (use Box, Discrete, MultiBinary or MultiDiscrete)")


TRUNCATION_NOTE = ("The last trajectory in the replay buffer will be truncated: each running episode is closed here as "
                   "cut by a time limit, so that no n-step return or HER goal crosses the break (its steps stay stored)")
TRUNCATION_RISK_NOTE = ("The last trajectory in the replay buffer will be truncated whenever learn(reset_num_timesteps=True) "
                        "finds an episode running (this call found none: nothing was cut); pass "
                        "reset_num_timesteps=False to keep episodes whole across learn calls")


class ReplayBuffer:
    """Uniform experience replay over transitions of ``n_envs`` parallel environments.

    Args:
        buffer_size: transitions it holds in all, split evenly across ``n_envs``.
        observation_space: a flat space or a ``Dict``; dict batches come back as dicts of tensors.
        action_space: Box, Discrete, MultiDiscrete or MultiBinary.
        device: where sampled tensors go ("auto": CUDA when available).
        n_envs: how many environments each ``add`` carries.
        optimize_memory_usage: store each state once (next states are the following rows) instead of
            storing both obs and next_obs. Costs one extra row per episode for its final state.
        handle_timeout_termination: treat ``TimeLimit.truncated`` as truncation (bootstrap through
            it) rather than termination.
        seed: seed of the buffer's own random generator (sampling is reproducible from it).
        n_steps: n-step returns (SB3's ``NStepReplayBuffer``): a sampled transition's reward becomes the sum of
            the rewards of up to ``n_steps`` steps of its episode, discounted by ``gamma``, stopping at the episode's
            end (a termination or truncation, or the last step stored so far); its next observation and ``dones``
            are those of the last step summed, and the batch's ``discounts`` hold gamma^m for the m steps summed.
            herl's algorithms pass their ``n_steps`` and ``gamma`` here.
        gamma: the discount of the n-step sums (the algorithm's gamma).
        prioritized: proportional prioritized replay (Schaul et al. 2015): transitions are drawn
            with probability p^alpha / sum p^alpha; batches carry importance ``weights`` and the
            ``indexes`` to pass to :meth:`update_priorities`.
        alpha: how much prioritization is used (0 is uniform).
        beta: importance-sampling exponent, the default for ``sample``; anneal it towards 1 by
            setting ``buffer.beta`` (or pass ``beta=`` to ``sample``).
        priority_eps: added to every priority given to ``update_priorities`` (|error| + eps), so
            that no transition becomes impossible to draw again.
        storage_device: keep the stored data as torch tensors on this device (e.g. "cuda"), so
            batches are gathered there with no host copy. None (default) stores NumPy arrays in
            host memory, the fastest choice for CPU training.
    """

    _splits_long_episodes = True  # plain replay: an endless stream overwrites its oldest transitions

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        seed: int | None = None,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        storage_device: torch.device | str | None = None,
        check_finite: bool = True,
        n_steps: int = 1,
        gamma: float = 0.99,
    ) -> None:
        # herl's rules, not int(): int(nan) raised "cannot convert float NaN to integer", naming no argument
        buffer_size = as_integer(type(self).__name__, "buffer_size", buffer_size)
        n_envs = as_integer(type(self).__name__, "n_envs", n_envs)
        check(type(self).__name__, "n_steps", n_steps, self.FILE_CONFIG["n_steps"])
        check(type(self).__name__, "gamma", gamma, self.FILE_CONFIG["gamma"])
        self.n_steps, self.gamma = int(n_steps), float(gamma)
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = get_device(device)
        self.n_envs = int(n_envs)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = bool(handle_timeout_termination)
        self.buffer_size = max(int(buffer_size) // max(self.n_envs, 1), 1)  # rows per env, as SB3
        if self.buffer_size < 2:  # SB3 takes buffer_size=1 (its tests do); herl's episode storage needs two rows
            warnings.warn(f"buffer_size={buffer_size} with n_envs={self.n_envs} is fewer than 2 transitions per env: "
                          "the buffer keeps 2 per env, the fewest herl's episode storage holds", UserWarning, stacklevel=2)
            self.buffer_size = 2
        self.seed = seed
        self.storage_device = None if storage_device is None else get_device(storage_device)
        self.rng = np.random.default_rng(seed)
        self._dict_obs = isinstance(observation_space, spaces.Dict)
        self._state_specs = state_specs(observation_space)
        self._action_spec = action_spec(action_space)
        self.check_finite = bool(check_finite)
        self._float_state_keys = tuple(k for k, spec in self._state_specs.items() if spec.dtype.kind == "f")
        self._float_action = self._action_spec.dtype.kind == "f"
        self._int_state_keys = tuple(k for k in self._state_specs if k not in self._float_state_keys)
        self.storage = self._make_storage(self.buffer_size, self.n_envs, share_states=self.optimize_memory_usage)
        self._cpu_numpy = self.device.type == "cpu" and self.storage_device is None
        # fields stored flat but batched with their shape (images, multi-dimensional actions)
        self._multi_dim_fields = {k: spec.shape for k, spec in [*self._state_specs.items(), ("action", self._action_spec)]
                                  if len(spec.shape) > 1}
        # expected shapes, precomputed: add() checks them on every call
        self._batch_shape = (self.n_envs,)
        self._action_shape = (self.n_envs, *self._action_spec.shape)
        self._obs_shapes = {k: (self.n_envs, *spec.shape) for k, spec in self._state_specs.items()}
        self._no_flags = np.zeros(self.n_envs, dtype=bool)
        for name, value in (("alpha", alpha), ("beta", beta), ("priority_eps", priority_eps)):
            check(type(self).__name__, name, value, self.FILE_CONFIG[name])
        self.prioritized = bool(prioritized)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.priority_eps = float(priority_eps)
        if self.prioritized:
            self._attach_priorities(self.storage)
        self._stores_infos = False  # subclasses that keep info entries set this
        self._on_episode_end = None  # called after an add that ended an episode, when set

    def _transition_specs(self) -> dict[str, FieldSpec]:
        return {
            "action": self._action_spec,
            "reward": FieldSpec((), np.dtype(np.float32)),
            # flags as float32 columns beside the reward: one gather fewer per batch, and dones
            # come out in the dtype the losses use
            "terminated": FieldSpec((), np.dtype(np.float32)),
            "truncated": FieldSpec((), np.dtype(np.float32)),
        }

    def _make_storage(self, rows: int, n_envs: int, *, share_states: bool,
                      size_argument: str = "buffer_size (it is split across n_envs)") -> EpisodeStorage:
        storage_class, extra = EpisodeStorage, {}
        if self.storage_device is not None:
            storage_class, extra = TorchEpisodeStorage, {"device": self.storage_device}
        storage = storage_class(
            **extra,
            rows=rows,
            n_envs=n_envs,
            state_fields=self._state_specs,
            transition_fields=self._transition_specs(),
            share_states=share_states,
            end_fields=("terminated", "truncated"),
            split_long_episodes=self._splits_long_episodes,
            size_argument=size_argument,
        )
        # a NumPy storage checks the rows it writes (one reduction per block); a torch one would sync its device on
        # every add, so its inputs are checked instead (see add)
        storage.check_finite = self.check_finite and storage_class is EpisodeStorage
        storage.on_non_finite = self._report_non_finite
        return storage

    # ------------------------------------------------------------------ SB3-compatible counters
    @property
    def pos(self) -> int:
        """Row the first environment writes next (SB3's ``pos``)."""
        return int(self.storage.pos[0])

    @property
    def full(self) -> bool:
        """Whether some environment's column has wrapped around."""
        return self.storage.window >= self.storage.rows

    def size(self) -> int:
        """Rows in use per environment, as SB3's ``size()``; ``len(buffer)`` counts sampleable transitions."""
        return self.storage.window

    def __len__(self) -> int:
        return self.storage.n_transitions

    def reset(self) -> None:
        """Forget everything stored (every store: offline HER keeps relabeled copies in a second one)."""
        for storage in self._storages().values():
            storage.clear()

    # ------------------------------------------------------------------ adding
    def add(
        self,
        obs: Any,
        next_obs: Any,
        action: Any,
        reward: Any,
        done: Any = None,
        infos: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        *,
        terminated: Any = None,
        truncated: Any = None,
    ) -> None:
        """Store one transition per environment, arrays shaped ``(n_envs, ...)``.

        Either SB3's form, ``done`` plus ``infos[i]["TimeLimit.truncated"]`` for truncation, or the
        keyword form with ``terminated`` and ``truncated`` separately (gymnasium's step API). For a
        single environment the leading axis may be left out.
        """
        if terminated is None:
            if done is None:
                raise ValueError("add() needs done (SB3 form) or terminated and truncated (gymnasium form)")
            if truncated is not None:  # it would be ignored: the SB3 form reads truncation from infos
                raise ValueError("add() got done and truncated: pass done with infos (SB3 form), or terminated and "
                                 "truncated (gymnasium form)")
            done = self._flags(done, "done")
            timeouts = self._timeouts(infos) if self.handle_timeout_termination and infos is not None else None
            if timeouts is not None and timeouts.any():
                # a time limit ends the episode even where done is 0 (SB3's n-step buffer reads it so): truncated
                done = done | timeouts
                truncated, terminated = timeouts, done & ~timeouts
            else:
                terminated, truncated = done, self._no_flags
            n_done = np.count_nonzero(done)
        else:
            if done is not None:
                raise ValueError("pass either done (with infos) or terminated/truncated, not both")
            terminated = self._flags(terminated, "terminated")
            truncated = self._no_flags if truncated is None else self._flags(truncated, "truncated")
            done = terminated | truncated
            n_done = None
        if type(reward) is not np.ndarray or reward.shape != self._batch_shape:
            reward = self._reshape(to_numpy(reward), (), "reward").astype(np.float32, copy=False)
        if type(action) is not np.ndarray or action.shape != self._action_shape:
            action = self._reshape(self._array(action), self._action_spec.shape, "action")
        transitions = {"action": action, "reward": reward, "terminated": terminated, "truncated": truncated}
        if self._stores_infos:
            self._add_info_fields(transitions, infos)
        obs, next_obs = self._obs(obs, "obs"), self._obs(next_obs, "next_obs")
        if self.check_finite and not self.storage.check_finite:  # a torch storage: check the inputs
            self._check_finite(obs, next_obs, action, reward)
        if self.check_finite and (self._int_state_keys or not self._float_action):
            self._check_integer_columns(obs, next_obs, action, reward)
        self.storage.add(obs, next_obs, transitions, done, n_done)
        if self._on_episode_end is not None and self.storage.n_starting:
            self._on_episode_end()

    def _report_non_finite(self, states: Mapping[str, Any], next_states: Mapping[str, Any],
                           transitions: Mapping[str, Any]) -> None:
        """Called by a NumPy storage whose rows just written hold NaN or infinity (it checks them in one reduction
        per block): raise, naming the env and the field. Inputs that were finite became infinite when stored in a
        narrower dtype (a float64 observation of 1e300 in a float32 column)."""
        self._check_finite(states, next_states, transitions["action"], transitions["reward"])
        info = [k for k in transitions if k not in ("action", "reward", "terminated", "truncated")]
        for key in info:
            bad = _non_finite_rows(np.asarray(transitions[key]), self.n_envs, self.storage.transition_fields[key].dtype)
            if bad is not None:
                raise NonFiniteError(f"info entry {key.split('/', 1)[-1]!r} of env {int(np.flatnonzero(bad)[0])} holds "
                                     "NaN or infinity; nothing of this add() was stored. Find where the env puts it in "
                                     "its info (or leave that key out of info_keys)")
        raise NonFiniteError("a value stored with the transition holds NaN or infinity; nothing of this add() was stored")

    def _check_integer_columns(self, obs: Mapping[str, Any], next_obs: Mapping[str, Any], action: Any,
                               reward: Any) -> None:
        """Floats given for an integer column (a MultiBinary or Discrete space whose env returns float arrays) are cast
        when stored, NaN and infinity to arbitrary integers without a word: refused as in a float column, naming the
        first cause (a dtype test per integer field, ~0.2 us an add; the finiteness test only for float input)."""
        for key in self._int_state_keys:
            if obs[key].dtype in _FLOAT_DTYPES or next_obs[key].dtype in _FLOAT_DTYPES:
                break
        else:
            if self._float_action or action.dtype not in _FLOAT_DTYPES:
                return
        values = [obs[k] for k in self._int_state_keys] + [next_obs[k] for k in self._int_state_keys]
        if any(value.dtype in _FLOAT_DTYPES and _non_finite_rows(value, self.n_envs) is not None
               for value in (values if self._float_action else [*values, action])):
            self._check_finite(obs, next_obs, action, reward, every_column=True)

    def _check_finite(self, obs: Mapping[str, Any], next_obs: Mapping[str, Any], action: Any, reward: Any, *,
                      every_column: bool = False) -> None:
        """Refuse NaN or infinity before anything is stored (one NaN observation made every weight and
        the normalizer NaN, silently), naming the env and the field. One reduction per float field: a sum is finite
        only if every element is (an overflowing sum of finite values is told apart by the exact check).

        The fields are checked in the order they come about, so the message blames the first cause: the observation
        acted on, the action chosen from it, then what the env answered (reward, next observation). A NaN action
        makes many envs answer NaN; blaming their observation sent people looking for a bug in the env when the
        policy had diverged. A value that is finite but overflows the dtype it is stored in (float64's 1e300 in a
        float32 column) is named as such: it would be stored as infinity (checked where an input is wider than its
        column: a NumPy storage finds such a value after writing it, and calls this through _report_non_finite)."""
        specs = self._state_specs
        keys = tuple(specs) if every_column else self._float_state_keys  # every_column: integer ones too
        fields = [("obs", k, obs[k], specs[k].dtype) for k in keys]
        if self._float_action or every_column:
            fields.append(("action", None, action, self._action_spec.dtype))
        fields.append(("reward", None, reward, _FLOAT32))
        fields += [("next_obs", k, next_obs[k], specs[k].dtype) for k in keys]
        for what, key, value, dtype in fields:
            bad = _non_finite_rows(value, self.n_envs, dtype)
            if bad is None:
                continue
            env = int(np.flatnonzero(bad)[0])
            name = what if key is None or not self._dict_obs else f"{what}[{key!r}]"
            row = to_numpy(value).reshape(self.n_envs, -1)[env]
            if np.isfinite(row).all():  # finite as given: too large for the column
                big = row[np.argmax(np.abs(row))]
                raise NonFiniteError(
                    f"{name} of env {env} holds {big:.3g}, which overflows {dtype} (the dtype it is stored in, at most "
                    f"{np.finfo(dtype).max:.3g}) and would be stored as infinity; nothing of this add() was stored. "
                    "Scale or clip that value where the env (or the code calling add) produces it, or give the space a "
                    "float64 dtype. (check_finite=False turns this check off.)"
                )
            if what == "action":
                raise NonFiniteError(
                    f"action of env {env} holds NaN or infinity, chosen from a finite observation; nothing of this "
                    "add() was stored. An action a model chose this way means its policy diverged (its weights are no "
                    "longer finite): lower learning_rate, normalize the rewards, or use clip_target=True for -1/0 goal "
                    "rewards, and continue from a checkpoint taken before; otherwise find where the code calling add "
                    "produces it. (check_finite=False turns this check off.)"
                )
            raise NonFiniteError(
                f"{name} of env {env} holds NaN or infinity; nothing of this add() was stored. Find where the "
                "env (or the code calling add) produces it: one non-finite number spreads to every network weight "
                "and normalizer statistic. (check_finite=False turns this check off.)"
            )

    def _add_info_fields(self, transitions: dict[str, np.ndarray], infos: Any) -> None:
        """Hook for subclasses that store info keys (HER with ``copy_info_dict``)."""

    def _flags(self, value: Any, name: str) -> np.ndarray:
        """Termination flags as a bool array; SB3 accepts any dtype (float arrays, ints, lists, tensors).

        The fast path must check the dtype too: a float ``done`` passed through unconverted breaks
        ``done & ~truncated``."""
        if type(value) is np.ndarray and value.dtype is _BOOL and value.shape == self._batch_shape:
            return value
        return self._reshape(to_numpy(value), (), name).astype(bool, copy=False)

    def _array(self, value: Any) -> Any:
        """Tensors stay tensors for a torch storage; everything else becomes a NumPy array."""
        if self.storage_device is not None and isinstance(value, torch.Tensor):
            return value
        return to_numpy(value) if isinstance(value, torch.Tensor) else np.asarray(value)

    def extend(self, *args: Any, **kwargs: Any) -> None:
        """Add several steps at once (SB3's method): each argument holds one entry per step, in :meth:`add`'s order
        (``obs, next_obs, action, reward, done, infos``)."""
        for step in zip(*args):
            self.add(*step, **kwargs)

    def _timeouts(self, infos: Any) -> np.ndarray:
        if infos is None:
            return np.zeros(self.n_envs, dtype=bool)
        if isinstance(infos, Mapping):  # gymnasium vector-env infos: a dict of arrays
            value = infos.get("TimeLimit.truncated")
            return np.zeros(self.n_envs, dtype=bool) if value is None else np.asarray(value, dtype=bool).reshape(self.n_envs)
        if len(infos) != self.n_envs:
            raise ValueError(f"infos has {len(infos)} entries for {self.n_envs} environment(s): pass one dict per environment")
        return np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos], dtype=bool)

    def _reshape(self, value: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
        """Accept ``(n_envs, *shape)``, or ``shape`` alone for one env; anything else is an error that says so."""
        expected = (self.n_envs, *shape)
        if isinstance(value, np.ndarray) and value.dtype.kind not in "biuf":
            raise ValueError(f"{name} holds {value.dtype} values ({value.ravel()[:3]!r}...), not numbers: pass numeric "
                             "arrays")
        if value.shape == expected:
            return value
        if self.n_envs == 1 and value.shape == shape:
            return value.reshape(expected)
        if shape == (1,) and value.ndim <= 1 and math.prod(value.shape) == self.n_envs:
            # discrete actions/observations as a flat vector, or one bare integer for one env
            return value.reshape(expected)
        raise ValueError(
            f"{name} has shape {value.shape}, expected {expected} (n_envs={self.n_envs} first, then the "
            f"space's shape {shape}): pass one row per environment"
        )

    def _obs(self, obs: Any, name: str) -> Mapping[str, np.ndarray]:
        """Validate one batch of observations; returns a mapping with at least the stored keys."""
        if not self._dict_obs:
            if type(obs) is not np.ndarray or obs.shape != self._obs_shapes["obs"]:
                obs = self._reshape(self._array(obs), self._state_specs["obs"].shape, name)
            return {"obs": obs}
        try:
            for key, shape in self._obs_shapes.items():
                value = obs[key]
                if type(value) is not np.ndarray or value.shape != shape:
                    return self._obs_slow(obs, name)
        except (KeyError, TypeError, IndexError):
            return self._obs_slow(obs, name)
        return obs

    def _obs_slow(self, obs: Any, name: str) -> dict[str, np.ndarray]:
        if not isinstance(obs, Mapping):
            raise ValueError(f"{name} must be a dict with keys {sorted(self._state_specs)}, got {type(obs).__name__}")
        out = {}
        for key, spec in self._state_specs.items():
            if key not in obs:
                raise ValueError(f"{name} lacks the key {key!r}: it must have the keys {sorted(self._state_specs)}")
            out[key] = self._reshape(self._array(obs[key]), spec.shape, f"{name}[{key!r}]")
        return out

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, env: Any = None, *, beta: float | None = None) -> ReplayBufferSamples | DictReplayBufferSamples:
        """Draw ``batch_size`` transitions (with replacement) as tensors on ``device``.

        Uniformly, or by priority with ``prioritized=True`` (then ``beta`` overrides ``self.beta``).
        ``env`` may be an SB3 ``VecNormalize`` (anything with ``normalize_obs`` and
        ``normalize_reward``), applied to the batch as SB3 does.
        """
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        arrays, storage, flat = self._sample_arrays(int(batch_size))
        samples = self._to_samples(arrays, env=env)
        if arrays.discounts is not None:
            samples = samples._replace(discounts=self._to_torch(arrays.discounts.reshape(-1, 1)))
        if not self.prioritized:
            return samples
        if storage.priorities is None:  # offline HER before its first episode ended: uniform
            weights, indexes = np.ones(len(flat), np.float32), np.full(len(flat), -1)
        else:
            weights = storage.priorities.weights(flat, self.beta if beta is None else beta, storage.n_transitions)
            indexes = flat
        return samples._replace(weights=self._to_torch(weights.reshape(-1, 1)), indexes=indexes)

    @property
    def device(self) -> torch.device:
        """Where sampled batches go."""
        return self._device

    @device.setter
    def device(self, device: torch.device | str) -> None:
        """Samples go to ``device`` from here on (SB3 code assigns ``buffer.device``), resolved as the constructor's
        ``device``; what is stored stays where it is (``storage_device``)."""
        self._device = get_device(device)
        self._cpu_numpy = self._device.type == "cpu" and self.__dict__.get("storage_device") is None
        self._device_changed()

    def _device_changed(self) -> None:
        """Drop what was kept on the old sampling device (HER: its demonstration masks)."""

    # ------------------------------------------------------------------ running episodes
    def truncate_last_trajectory(self, warn: bool = True) -> int:
        """Close every running episode as cut by a time limit (SB3's method): before an env reset that the buffer
        does not see, so that no n-step return or HER goal crosses it. ``warn`` says so when an episode was running,
        as SB3 does; herl's own calls pass False where the reset is theirs to make. Returns how many were closed."""
        storage = self.storage
        envs = np.flatnonzero(storage.open_len > 0)
        if warn and len(envs):
            warnings.warn(TRUNCATION_NOTE, UserWarning, stacklevel=2)
        last_rows = storage.close(envs)
        storage.transitions["truncated"][last_rows, envs] = True
        self._after_truncation(envs)
        return len(envs)

    def _after_truncation(self, envs: np.ndarray) -> None:
        """What else closing the running episodes of ``envs`` needs (HER: its per-episode book-keeping)."""

    # ------------------------------------------------------------------ SB3's arrays
    # Stable-Baselines3 keeps one array per field shaped (rows, n_envs, ...), and code written for it reads them;
    # herl packs the fields side by side (storage.py). These are copies in SB3's names and shapes: writing into
    # one changes nothing stored (add() stores).
    @property
    def observations(self) -> Any:
        return self._sb3_states(self.storage.states)

    @property
    def next_observations(self) -> Any:
        storage = self.storage
        if storage.share_states:  # the next state of row r is row r + 1's state
            return self._sb3_states({k: np.roll(to_numpy(v), -1, axis=0) for k, v in storage.states.items()})
        return self._sb3_states(storage.next_states)

    @property
    def actions(self) -> np.ndarray:
        return np.array(to_numpy(self.storage.transitions["action"]))

    @property
    def rewards(self) -> np.ndarray:
        return np.array(to_numpy(self.storage.transitions["reward"]), dtype=np.float32)

    @property
    def dones(self) -> np.ndarray:
        """1 where an episode ended (terminated or truncated), as SB3's ``dones``."""
        transitions = self.storage.transitions
        return ((to_numpy(transitions["terminated"]) > 0) | (to_numpy(transitions["truncated"]) > 0)).astype(np.float32)

    @property
    def timeouts(self) -> np.ndarray:
        """1 where an episode was cut by a time limit, as SB3's ``timeouts``."""
        return (to_numpy(self.storage.transitions["truncated"]) > 0).astype(np.float32)

    def _sb3_states(self, states: Mapping[str, Any]) -> Any:
        copies = {k: np.array(to_numpy(v)) for k, v in states.items()}
        return copies if self._dict_obs else copies["obs"]

    def _get_samples(self, batch_inds: Any, env: Any = None) -> ReplayBufferSamples | DictReplayBufferSamples:
        """The transitions stored at rows ``batch_inds``, each from a random environment's column, as tensors (SB3's
        internal ``_get_samples``, which SB3's own tests and some user code call); n-step returns as in :meth:`sample`.
        A row that holds no sampleable transition (not written yet, or part of an overwritten episode) is refused."""
        storage = self.storage
        rows = np.asarray(batch_inds).reshape(-1)
        if rows.dtype.kind not in "iu" or (rows < 0).any() or (rows >= storage.rows).any():
            raise IndexError(f"batch_inds must be whole numbers in [0, {storage.rows}), got {batch_inds!r}")
        envs = self.rng.integers(self.n_envs, size=len(rows)) if self.n_envs > 1 else np.zeros(len(rows), np.int64)
        if not storage.is_transition[rows, envs].all():
            raise IndexError(f"rows {sorted(set(rows[~storage.is_transition[rows, envs]].tolist()))} hold no stored "
                             "transition: sample rows below size() that an episode still holds")
        flat = rows.astype(np.int64) * self.n_envs + envs
        batch = GatheredRows(storage, flat)
        if self.n_steps > 1:
            self._n_step(storage, flat, batch)
        samples = self._to_samples(batch, env=env)
        if batch.discounts is not None:
            samples = samples._replace(discounts=self._to_torch(batch.discounts.reshape(-1, 1)))
        return samples

    def _sample_arrays(self, batch_size: int):
        storage = self.storage
        flat = storage.sample_flat(batch_size, self.rng)
        batch = GatheredRows(storage, flat)
        if self.n_steps > 1:
            self._n_step(storage, flat, batch)
        return batch, storage, flat

    # ------------------------------------------------------------------ n-step returns
    def _n_step(self, storage: EpisodeStorage, flat: np.ndarray, batch: GatheredRows) -> None:
        """Turn the one-step transitions of ``batch`` (stored at ``flat``) into n-step ones, in place: rewards summed
        with discounts over up to ``n_steps`` steps of their episode, the last step's next state and flags, and
        ``batch.discounts`` = gamma^m. Stops after a terminated step and at the end of what the episode has stored."""
        offsets, lengths = storage.episode_position(flat)
        left = lengths - offsets  # steps from each transition to its episode's stored end (>= 1)
        rewards, terminated = batch.transition("reward"), batch.transition("terminated")
        total = to_numpy(rewards).astype(np.float64)
        done = to_numpy(terminated) > 0
        used = np.ones(len(flat), dtype=np.int64)
        discount = 1.0
        for k in range(1, self.n_steps):
            discount *= self.gamma
            rows = np.flatnonzero((left > k) & ~done)
            if not len(rows):
                break
            step_rewards, step_terminated = self._step_values(storage, storage.shift(flat[rows], k), batch, rows)
            total[rows] += discount * step_rewards
            used[rows] += 1
            done[rows] = step_terminated
        _write(rewards, total.astype(np.float32))
        longer = np.flatnonzero(used > 1)
        if len(longer):
            last = GatheredRows(storage, storage.shift(flat[longer], used[longer] - 1))
            for name in storage.state_fields:
                _write_rows(batch.next_state(name), longer, last.next_state(name))
            _write_rows(batch.transition("truncated"), longer, last.transition("truncated"))
            _write(terminated, done.astype(np.float32))
            self._n_step_next_states(batch, longer)
        batch.discounts = (self.gamma ** used).astype(np.float32)

    def _step_values(self, storage: EpisodeStorage, at: np.ndarray, batch: GatheredRows,
                     rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reward and termination (bools) of the stored steps at ``at``, continuing ``rows`` of ``batch``."""
        return (to_numpy(storage.field("t", "reward", at)).astype(np.float64),
                to_numpy(storage.field("t", "terminated", at)) > 0)

    def _n_step_next_states(self, batch: GatheredRows, rows: np.ndarray) -> None:
        """After ``rows`` of ``batch`` got the next states of later steps: what else those need (HER: their goal)."""

    def _attach_priorities(self, storage: EpisodeStorage) -> None:
        from herl.buffers.priority import PriorityTree

        storage.priorities = PriorityTree(storage.rows * storage.n_envs, alpha=self.alpha)

    def update_priorities(self, indexes: np.ndarray, priorities: Any) -> None:
        """Set the priorities of sampled transitions (typically |TD error|); ``indexes`` from the batch.

        ``priority_eps`` is added so that no transition becomes impossible to draw again.
        """
        if not self.prioritized:
            raise ValueError("update_priorities needs a prioritized buffer: construct it with prioritized=True")
        if isinstance(priorities, torch.Tensor):
            priorities = priorities.detach().cpu().numpy()
        indexes = np.asarray(indexes).ravel()
        priorities = np.abs(np.asarray(priorities, dtype=np.float64).ravel()) + self.priority_eps
        if indexes.shape != priorities.shape:
            raise ValueError(f"got {indexes.size} indexes but {priorities.size} priorities: pass one per sampled transition")
        known = indexes >= 0
        tree = self._prioritized_storage().priorities
        if tree is not None:
            tree.update(indexes[known], priorities[known])

    def _prioritized_storage(self) -> EpisodeStorage:
        return self.storage

    def max_priority(self) -> float:
        """The highest priority given so far (1.0 before any update), which new transitions get."""
        if not self.prioritized:
            raise ValueError("max_priority needs a prioritized buffer: construct it with prioritized=True")
        tree = self._prioritized_storage().priorities
        return 1.0 if tree is None else float(tree.max_priority)

    def _to_samples(self, rows: GatheredRows, *, env: Any = None):
        if env is not None and (hasattr(env, "normalize_obs") or hasattr(env, "normalize_reward")):
            obs, next_obs, fields = rows.fields()
            return self._normalized_samples(obs, fields["action"], next_obs, fields["terminated"], fields["truncated"],
                                            fields["reward"], env=env)
        # one tensor (one host-to-device copy) per gathered block, split into views of its fields
        pieces, index = rows.pieces(self._to_torch), rows.storage.piece_index
        shaped = self._multi_dim_fields
        obs = {k: pieces[index["s", k]] for k in self._state_specs}
        next_obs = {k: pieces[index["n", k]] for k in self._state_specs}
        actions = pieces[index["t", "action"]]
        if shaped:
            n = pieces[0].shape[0]
            obs = {k: v.reshape(n, *shaped[k]) if k in shaped else v for k, v in obs.items()}
            next_obs = {k: v.reshape(n, *shaped[k]) if k in shaped else v for k, v in next_obs.items()}
            actions = actions.reshape(n, *shaped["action"]) if "action" in shaped else actions
        dones = pieces[index["t", "terminated"]]  # float32 (batch, 1) columns, as SB3's batches have them
        if not self.handle_timeout_termination:
            dones = torch.maximum(dones, pieces[index["t", "truncated"]])
        rewards = pieces[index["t", "reward"]]
        if self._dict_obs:
            return DictReplayBufferSamples(obs, actions, next_obs, dones, rewards)
        return ReplayBufferSamples(obs["obs"], actions, next_obs["obs"], dones, rewards)

    def _normalized_samples(self, obs, actions, next_obs, terminated, truncated, rewards, *, env: Any):
        """Samples through an SB3 ``VecNormalize`` (anything with ``normalize_obs`` / ``normalize_reward``)."""
        if hasattr(env, "normalize_obs"):
            obs, next_obs = self._normalized_obs(env, obs), self._normalized_obs(env, next_obs)
        if hasattr(env, "normalize_reward"):
            rewards = env.normalize_reward(to_numpy(rewards))
        dones = terminated if self.handle_timeout_termination else _either(terminated, truncated)
        tensor = self._to_torch
        dones, rewards = tensor(_column(dones)), tensor(_column(rewards))
        if self._dict_obs:
            observations = {k: tensor(v) for k, v in obs.items()}
            next_observations = {k: tensor(v) for k, v in next_obs.items()}
            return DictReplayBufferSamples(observations, tensor(actions), next_observations, dones, rewards)
        return ReplayBufferSamples(tensor(obs["obs"]), tensor(actions), tensor(next_obs["obs"]), dones, rewards)

    def _normalized_obs(self, env: Any, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self._dict_obs:
            return env.normalize_obs({k: to_numpy(v) for k, v in obs.items()})
        return {"obs": env.normalize_obs(to_numpy(obs["obs"]))}  # a flat space: VecNormalize takes the array

    def _to_torch(self, array: np.ndarray | torch.Tensor) -> torch.Tensor:
        if self._cpu_numpy and type(array) is np.ndarray:  # the common case, in the sampling hot path
            return torch.from_numpy(array)
        tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
        return tensor if tensor.device == self.device else tensor.to(self.device, non_blocking=True)

    to_torch = _to_torch  # SB3's name

    # ------------------------------------------------------------------ persistence
    FILE_KIND = "replay_buffer"
    FILE_VERSION = 2  # 2: per-row arrays hold the rows written so far only (version 1 files, all rows, still load)

    def _config(self) -> dict[str, Any]:
        return {
            "buffer_size": self.buffer_size * self.n_envs,
            "n_envs": self.n_envs,
            "optimize_memory_usage": self.optimize_memory_usage,
            "handle_timeout_termination": self.handle_timeout_termination,
            "prioritized": self.prioritized,
            "alpha": self.alpha,
            "beta": self.beta,
            "priority_eps": self.priority_eps,
            "storage_device": None if self.storage_device is None else str(self.storage_device),
            "check_finite": self.check_finite,
            "n_steps": self.n_steps,
            "gamma": self.gamma,
        }

    def _storages(self) -> dict[str, EpisodeStorage]:
        return {"storage": self.storage}

    def save(self, path: str | os.PathLike) -> None:
        """Write the buffer, its episode book-keeping and its generator state to ``path`` (JSON + safetensors)."""
        from herl.io import space_to_json, write_archive

        arrays = {
            f"{prefix}/{name}": array for prefix, storage in self._storages().items()
            for name, array in storage.arrays(written_only=True).items()
        }
        meta = {
            "class": type(self).__name__,
            "config": self._config(),
            "observation_space": space_to_json(self.observation_space),
            "action_space": space_to_json(self.action_space),
            "rng_state": self.rng.bit_generator.state,
        }
        write_archive(path, kind=self.FILE_KIND, version=self.FILE_VERSION, meta=meta, arrays=arrays)

    # What a file's config may hold, with its rules; checked before anything is built from it.
    FILE_CONFIG: ClassVar[dict[str, Rule | None]] = {
        "buffer_size": POSITIVE_INT, "n_envs": POSITIVE_INT, "optimize_memory_usage": BOOL,
        "handle_timeout_termination": BOOL, "prioritized": BOOL, "alpha": number(0.0), "beta": number(0.0, 1.0),
        "priority_eps": number(0.0, low_open=True, note="a zero priority would never be drawn again"), "storage_device": Rule("choice", choices=(None,), also=()),
        "check_finite": BOOL, "n_steps": POSITIVE_INT, "gamma": number(0.0, 1.0),
    }

    @classmethod
    def settings_from_file(cls, settings: Mapping[str, Any], source: str) -> dict[str, Any]:
        """The constructor settings that ``source`` (a buffer file's config, a model file's ``replay_buffer_kwargs``)
        holds, as this class takes them now."""
        return dict(settings)

    @classmethod
    def _read(cls, path: str | os.PathLike):
        from herl.io import read_archive, space_from_json
        from herl.io.archive import generator_state

        meta, arrays = read_archive(path, kind=cls.FILE_KIND, max_version=cls.FILE_VERSION)
        # an n-step buffer is a ReplayBuffer with n_steps set: ReplayBuffer.load reads one (a model with n_steps > 1
        # makes its buffer as an NStepReplayBuffer, and loads it back through its replay_buffer_class)
        if meta.get("class") != cls.__name__ and not (cls is ReplayBuffer and meta.get("class") == "NStepReplayBuffer"):
            raise ArchiveError(f"{path} holds a {meta.get('class')}, not a {cls.__name__}: load it with "
                               f"{meta.get('class')}.load")
        generator_state(path, meta)
        with _file_errors(path):
            config = meta.get("config")
            if not isinstance(config, dict):
                raise ArchiveError(f"{path}: its config is missing or not a mapping: the file is damaged")
            config = meta["config"] = cls.settings_from_file(config, f"the buffer file {path}")
            unknown = sorted(set(config) - set(cls.FILE_CONFIG))
            if unknown:
                raise ArchiveError(f"{path}: its config holds {unknown}, which are not {cls.__name__} settings")
            for key, value in config.items():
                rule = cls.FILE_CONFIG[key]
                if rule is not None and not (key == "storage_device" and isinstance(value, str)):
                    check(f"{path}: the saved", key, value, rule)
            shapes = cls._file_shapes(config)
            for prefix, (rows, n_envs) in shapes.items():
                found = getattr(arrays.get(f"{prefix}/is_transition"), "shape", None)
                if found is None or len(found) != 2 or found[1] != n_envs or found[0] > rows:
                    raise ArchiveError(f"{path}: its {prefix} holds rows shaped {found}, but its config says at most "
                                       f"{(rows, n_envs)}: the file is damaged")
            _check_claimed_memory(path, config, shapes, arrays)
            if config.get("check_finite", True):
                for prefix, (rows, _) in shapes.items():
                    _check_finite_rows(path, prefix, arrays, rows, bool(config.get("optimize_memory_usage")))
            return meta, arrays, space_from_json(meta["observation_space"]), space_from_json(meta["action_space"])

    @classmethod
    def _file_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """The ``(rows, n_envs)`` of each storage a file with ``config`` holds."""
        n_envs = config.get("n_envs", 1)
        return {"storage": (max(config.get("buffer_size", 1) // n_envs, 1), n_envs)}

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray], seed: int | None) -> None:
        for prefix, storage in self._storages().items():
            storage.restore({k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + "/")})
        if seed is None:
            self.rng.bit_generator.state = meta["rng_state"]
        else:
            self.rng = np.random.default_rng(seed)
            self.seed = seed

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: torch.device | str = "auto", seed: int | None = None,
             **settings: Any) -> ReplayBuffer:
        """Read a buffer saved by :meth:`save`. ``seed`` reseeds sampling; by default it continues as saved.
        ``settings``: a subclass's own constructor settings, which the file (herl's settings only) does not keep."""
        meta, arrays, obs_space, act_space = cls._read(path)
        klass = NStepReplayBuffer if meta["class"] == "NStepReplayBuffer" else cls
        with _file_errors(path):
            buffer = klass(observation_space=obs_space, action_space=act_space, device=device,
                           **meta["config"], **own_settings(path, meta["config"], settings))
            buffer._restore(meta, arrays, seed)
        return buffer


def own_settings(path: Any, config: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` given to ``load`` beside a file's ``config``: a subclass's own, which the file does not keep; one
    the file keeps is refused (the file's value is the buffer's)."""
    kept = sorted(set(settings) & set(config))
    if kept:
        raise ValueError(f"{path} keeps {kept} itself: load takes only settings the file does not keep (a subclass's "
                         "own constructor settings)")
    return dict(settings)


def herl_settings(cls: type) -> frozenset[str]:
    """The constructor settings of the herl buffer class ``cls`` derives from (a subclass's own are the others)."""
    import inspect

    base = next(klass for klass in cls.__mro__ if is_herls(klass))
    return frozenset(inspect.signature(base.__init__).parameters)


class NStepReplayBuffer(ReplayBuffer):
    """SB3's ``NStepReplayBuffer``: a :class:`ReplayBuffer` with n-step returns on by default (``n_steps=3``,
    ``gamma=0.99``, as SB3's). herl's algorithms also take ``n_steps=`` directly, with any buffer, HER included."""

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(*args, n_steps=n_steps, gamma=gamma, **kwargs)


def _write(view, values: np.ndarray) -> None:
    """``view[:] = values`` for a NumPy or torch view of a gathered batch."""
    if isinstance(view, np.ndarray):
        view[...] = values.reshape(view.shape)
    else:
        view.copy_(torch.from_numpy(values).reshape(view.shape).to(view.device, view.dtype))


def _write_rows(view, rows: np.ndarray, values) -> None:
    """``view[rows] = values`` for NumPy or torch (``values`` of the same kind as ``view``)."""
    if isinstance(view, np.ndarray):
        view[rows] = values
    else:
        view[torch.from_numpy(rows).to(view.device)] = values


def _memory_bytes() -> int | None:
    """This machine's physical memory, where the OS says (POSIX)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _check_claimed_memory(path: str | os.PathLike, config: dict[str, Any], shapes: dict[str, tuple[int, int]],
                          arrays: dict[str, np.ndarray]) -> None:
    """Refuse a file whose config claims more storage than this machine has memory, before anything is allocated.

    A file holds the rows written so far only, so its config may rightly claim more rows than it holds; what a claimed
    row costs is known from the file's own per-row arrays (their dtypes and trailing shapes). A claim that no machine
    like this one could have saved (``buffer_size=10**13``) is a damaged file, not a MemoryError from NumPy."""
    memory = _memory_bytes()
    need = 0
    for prefix, (rows, n_envs) in shapes.items():
        written = arrays[f"{prefix}/is_transition"].shape[0]
        row_bytes = sum(a.dtype.itemsize * math.prod(a.shape[1:]) for name, a in arrays.items()
                        if name.startswith(prefix + "/") and a.ndim >= 2 and a.shape[:2] == (written, n_envs))
        need += rows * max(row_bytes, 1)
    if memory is not None and need > memory:
        held = ", ".join(f"{arrays[prefix + '/is_transition'].shape[0]:,} rows of its {prefix}" for prefix in shapes)
        raise ArchiveError(
            f"{path}: its config claims buffer_size={config.get('buffer_size'):,}, storage of {need:,} bytes, more "
            f"than this machine's {memory:,} bytes of memory (the file holds {held}): the file is damaged, or load it "
            "on a machine with that much memory"
        )


def _check_finite_rows(path: str | os.PathLike, prefix: str, arrays: dict[str, np.ndarray], rows: int,
                       shared: bool) -> None:
    """Refuse NaN or infinity in a stored transition's observations, action or reward: ``add`` refuses them
    (``check_finite=True``, which the file's config says), so a file that holds them is damaged or edited, and would
    make every update NaN. Rows that hold no transition are not looked at (an add refused for a NaN leaves its values
    in rows that belong to no episode)."""
    stored = arrays[f"{prefix}/is_transition"].astype(bool)
    written = stored.shape[0]
    next_state = stored.copy()  # with shared states, the next state of row r is the state of row r + 1
    next_state[1:] |= stored[:-1]
    if written == rows:  # a full buffer wraps around
        next_state[0] |= stored[-1]
    for name in sorted(arrays):
        field = name[len(prefix) + 1:]
        if not name.startswith(prefix + "/") or not (field.startswith(("state/", "next_state/"))
                                                      or field in ("transition/action", "transition/reward")):
            continue
        array = arrays[name]
        if array.dtype.kind not in "fc" or array.shape[:2] != stored.shape or np.isfinite(array).all():
            continue
        where = stored | next_state if shared and field.startswith("state/") else stored
        bad = ~np.isfinite(array.reshape(*stored.shape, -1)).all(axis=2) & where
        if bad.any():
            row, env = (int(i[0]) for i in np.nonzero(bad))
            raise ArchiveError(
                f"{path}: its {name} holds NaN or infinity at row {row} (env {env}), in a stored transition: the "
                "buffer was saved with check_finite=True, whose add() refuses such values, so the file is damaged or "
                "was edited; load an intact copy"
            )


_FLOAT32 = np.dtype(np.float32)
_FLOAT_DTYPES = frozenset([*(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.longdouble)),
                           torch.float16, torch.bfloat16, torch.float32, torch.float64])


def _non_finite_rows(value: Any, n_envs: int, stored: np.dtype | None = None) -> np.ndarray | None:
    """Which envs' rows of ``value`` (an array or tensor shaped (n_envs, ...)) hold NaN or infinity, or would once
    stored in the narrower float dtype ``stored``; None when none do (the common case: one reduction)."""
    if type(value) is np.ndarray:
        narrower = stored is not None and stored.kind == "f" and value.dtype.kind == "f" \
            and value.dtype.itemsize > stored.itemsize
        if narrower:
            with np.errstate(over="ignore"):  # the overflow is what is looked for
                value = value.astype(stored)
        elif math.isfinite(np.add.reduce(value, None)):
            return None
        bad = ~np.isfinite(value.reshape(n_envs, -1)).all(axis=1)
    else:  # a torch tensor (torch storage)
        if stored is not None and value.is_floating_point() and value.element_size() > stored.itemsize:
            value = value.to(getattr(torch, stored.name))
        bad = (~torch.isfinite(value.reshape(n_envs, -1)).all(dim=1)).cpu().numpy()
    return bad if bad.any() else None


@contextlib.contextmanager
def _file_errors(path: str | os.PathLike):
    """Turn what a damaged file makes numpy, torch or a constructor raise into an ArchiveError naming the file."""
    try:
        yield
    except HerlError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, OverflowError, AttributeError) as err:
        raise ArchiveError(f"{path}: a damaged buffer file ({type(err).__name__}: {err})") from err
