"""What every off-policy algorithm shares: the Stable-Baselines3 face (constructor, ``learn``,
``predict``, ``save``/``load``, parameters, envs) around an algorithm file that only knows its
networks, losses and update.

An algorithm subclasses :class:`OffPolicyAlgorithm` and defines

- ``config_class``: its frozen hyperparameter dataclass;
- ``_build()``: its networks (in ``self.nets``, a ``ModuleDict``) and optimizers (``self.optimizers``);
- ``_act_from(x, noise)``: actions for encoded observations and what acting drew (``_act_noise(n,
  deterministic)``, None by default), tensors only, so that ``compile=True`` can compile acting; or ``_act(x,
  deterministic)`` whole (what ``predict`` and the loop call), which then stays eager;
- ``_update(batch)``: one gradient step; the algorithms here define its parts instead (``_update_inputs``,
  ``_losses``, ``_after_step``: see :meth:`OffPolicyAlgorithm._update`), so that ``compile=True`` can compile the
  step (on a CPU the whole of it: :mod:`herl.training.fused_step`). ``_losses`` reads parameters through
  ``self.nets`` and changes no tensor: the compiled step differentiates it with ``torch.func.grad``.

The loop that touches the environment is :func:`herl.training.loop.run`, the only one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from herl.algorithms.bc import check_demonstrations
from herl.buffers import HerReplayBuffer, NStepReplayBuffer, ReplayBuffer
from herl.buffers.replay import herl_settings
from herl.envs.checks import action_space_fix
from herl.errors import (BOOL, NON_NEGATIVE_INT, POSITIVE_INT, ActionSpaceError, ConfigError, EnvMismatchError,
                         NonFiniteError, as_integer, check, did_you_mean, integer)
from herl.nn.acting import ActingNetwork
from herl.nn.extractors import ExtractorInput, extractor_class, has_features, has_images, make_extractor
from herl.nn.mlp import PRECISIONS, resolve_precision, set_precision
from herl.nn.policies import ObservationEncoder, input_keys
from herl.training.config import AUTO_EXTRACTOR, SDE_REFUSAL, OffPolicyConfig, PolicyConfig
from herl.training.envs import as_env_adapter, is_goal_space, make_env
from herl.training.fused_step import FusedStep, compile_update, first_call, fused_step_unsupported
from herl.training.logger import Logger
from herl.training.noise import ActionNoise, as_action_noise
from herl.utils import flush_denormals, get_device, warn_if_threads_wait

POLICIES = ("MultiInputPolicy", "MlpPolicy", "CnnPolicy")
# Updates between two checks that the losses are finite (each check is one device sync; see check_losses).
LOSS_CHECK_EVERY = 100
# What each logged training value is, for the message of a non-finite one.
LOSS_TERMS = {"critic_loss": "critic loss", "actor_loss": "actor loss", "ent_coef": "entropy coefficient",
              "ent_coef_loss": "entropy coefficient loss", "loss": "Q-network loss",
              "bc_loss": "behaviour-cloning loss"}


def check_n_step_gamma(model: Any, buffer: Any) -> None:
    """An n-step buffer discounts its rewards with its own gamma: it must be the algorithm's."""
    if getattr(buffer, "n_steps", 1) > 1 and buffer.gamma != model.config.gamma:
        raise ValueError(
            f"the replay buffer sums n-step rewards with gamma={buffer.gamma} but {type(model).__name__} has "
            f"gamma={model.config.gamma}: give the buffer the algorithm's (replay_buffer_kwargs gamma), or leave it out"
        )


class Parameters(dict):
    """:meth:`OffPolicyAlgorithm.get_parameters`' dict: one entry per network and optimizer, each weight listed once.

    SB3's ``"policy"`` entry (every network in one state dict, by ``model.policy``'s names) is given on request:
    ``params["policy"]`` returns it and from then on holds it as an entry, so a copy of it that the caller changed is
    what :meth:`~OffPolicyAlgorithm.set_parameters` loads (after the networks' own entries). Until asked for it is not
    listed, so code that walks the entries (SB3's tests change every tensor but one per entry) sees no weight twice.
    """

    def __init__(self, entries: Mapping[str, Any], *, policy: Mapping[str, Any]) -> None:
        super().__init__(entries)
        self._policy = policy

    def __missing__(self, key: str) -> Any:
        if key != "policy":
            raise KeyError(key)
        self["policy"] = self._policy
        return self._policy

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self or key == "policy" else default


def _replay_buffer_class(owner: str, value: Any) -> type[ReplayBuffer]:
    """``replay_buffer_class`` as given (None: :class:`ReplayBuffer`), or a :class:`ConfigError` that says what to
    pass: a buffer object (its settings belong in ``replay_buffer_kwargs``), a name, another library's class."""
    if value is None:
        return ReplayBuffer
    if isinstance(value, type) and issubclass(value, ReplayBuffer):
        return value
    name = getattr(value, "__name__", str(value))
    if isinstance(value, ReplayBuffer):
        fix = (f"the class, replay_buffer_class={type(value).__name__}, with the object's settings in "
               "replay_buffer_kwargs=dict(...)")
    elif name in ("ReplayBuffer", "DictReplayBuffer", "HerReplayBuffer", "NStepReplayBuffer"):
        herl_name = "ReplayBuffer" if name == "DictReplayBuffer" else name
        what = "not its name" if isinstance(value, str) else "not another library's"
        fix = f"herl's class (from herl import {herl_name}; replay_buffer_class={herl_name}), {what}"
    else:
        fix = "a class: herl.ReplayBuffer (the default), herl.HerReplayBuffer, or a subclass of herl.ReplayBuffer"
    raise ConfigError(owner, "replay_buffer_class", value, fix)


class OffPolicyAlgorithm:
    """Base of DQN, DDPG, TD3 and SAC. Construct one of those, not this class.

    Args:
        policy: ``"MultiInputPolicy"`` or ``"MlpPolicy"`` (both accept dict goal observations), or ``"CnnPolicy"``
            (image observations, read by a :class:`~herl.nn.extractors.NatureCNN`).
        env: a gymnasium env, an env id, a gymnasium vector env (SAME_STEP or DISABLED autoreset),
            or None with ``observation_space`` and ``action_space`` (a model that only predicts,
            or gets an env later with :meth:`set_env`).
        action_noise: exploration noise for deterministic policies (DDPG, TD3).
        replay_buffer_class: ``herl.ReplayBuffer`` (default) or ``herl.HerReplayBuffer``.
        replay_buffer_kwargs: extra arguments of the buffer, e.g. ``dict(n_sampled_goal=4,
            goal_selection_strategy="future")``.
        policy_kwargs: ``net_arch`` (a list, or ``dict(pi=[...], qf=[...])``), ``activation_fn``, ``n_critics``,
            SB3's ``features_extractor_class``, ``features_extractor_kwargs``, ``share_features_extractor`` and
            ``normalize_images`` (see :mod:`herl.nn.extractors`).
        tensorboard_log: folder for TensorBoard logs (one subfolder per ``learn`` call).
        verbose: 1 prints the training table, 0 nothing.
        seed: seeds the networks, the exploration, the buffer's sampling and the env's first reset.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ... (``"cuda"`` on a machine without CUDA
            falls back to the CPU with a warning, as SB3 does without one).
        n_envs: with an env id, how many copies to step together.
        **hyperparameters: the fields of the algorithm's config (``learning_rate``, ``buffer_size``, ...), and SB3's
            ``optimize_memory_usage`` (passed to the replay buffer), ``use_sde=False``, ``_init_setup_model=True``.
    """

    config_class: ClassVar[type[OffPolicyConfig]] = OffPolicyConfig
    default_net_arch: ClassVar[tuple[int, ...] | Mapping[str, tuple[int, ...]]] = (256, 256)
    """Hidden layers of actor and critics, or ``{"pi": ..., "qf": ...}``."""
    default_n_critics: ClassVar[int] = 2
    policy_options: ClassVar[Mapping[str, Any]] = {}
    """Policy kwargs the algorithm reads beyond ``net_arch``, ``activation_fn`` and ``n_critics``, with defaults."""
    action_space_types: ClassVar[tuple[type, ...]] = (spaces.Box,)
    precisions: ClassVar[tuple[str, ...]] = tuple(PRECISIONS)
    saved_state: ClassVar[tuple[str, ...]] = ("_total_timesteps", "_current_progress_remaining")
    """Numbers besides the counters that training reads and the model file keeps (DQN adds its exploration rate and
    the step of its last target update), so that a loaded model trains on as the saved one would."""
    """The ``precision`` policy settings the algorithm can run in (``"auto"`` picks among them)."""

    def __init__(
        self,
        policy: str,
        env: Any = None,
        *,
        action_noise: ActionNoise | None = None,
        replay_buffer_class: type[ReplayBuffer] | None = None,
        replay_buffer_kwargs: Mapping[str, Any] | None = None,
        policy_kwargs: Mapping[str, Any] | None = None,
        tensorboard_log: str | os.PathLike | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        observation_space: spaces.Space | None = None,
        action_space: spaces.Space | None = None,
        n_envs: int = 1,
        **hyperparameters: Any,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}: use one of {list(POLICIES)} (policy classes are not supported)")
        self.policy_name = policy  # the policy string ("MultiInputPolicy"); self.policy is the networks
        owner = type(self).__name__
        replay_buffer_kwargs = _accept_sb3_arguments(owner, hyperparameters, replay_buffer_kwargs)
        check(owner, "seed", seed, integer(0, also=(None,)))
        check(owner, "n_envs", n_envs, POSITIVE_INT)
        schedule = hyperparameters.get("learning_rate")
        if callable(schedule):  # SB3's schedule: the progress remaining (1 -> 0) to the rate; it starts at fn(1)
            hyperparameters["learning_rate"] = _initial_rate(owner, schedule)
        self.config = self.config_class.from_kwargs(hyperparameters)
        if callable(schedule):
            self.lr_schedule = schedule
        self.policy_config = PolicyConfig.from_kwargs(policy_kwargs, self.default_net_arch, self.default_n_critics,
                                                 self.policy_options)
        self.check_policy_config(self.policy_config)
        self.device = get_device(device)
        precision = resolve_precision(self.policy_config.precision, self.device, self.precisions)
        self.policy_config = dataclasses.replace(self.policy_config, precision=precision)  # saved as resolved
        self.verbose = int(verbose)
        self.tensorboard_log = None if tensorboard_log is None else str(tensorboard_log)
        action_noise = as_action_noise(action_noise)
        self.action_noise = action_noise
        self.replay_buffer_class = _replay_buffer_class(type(self).__name__, replay_buffer_class)
        self.replay_buffer_kwargs = dict(replay_buffer_kwargs or {})
        if self.replay_buffer_kwargs.get("prioritized") and not self.updates_priorities:
            raise ConfigError(type(self).__name__, "replay_buffer_kwargs prioritized", True,
                              f"False: {type(self).__name__} weighs no loss by importance and feeds back no priorities, "
                              "so its batches would be drawn by priorities that never change (DQN uses them)")
        self.seed = seed
        # One seed sequence feeds every generator, so a seed fixes the whole run (STYLE.md: randomness explicit).
        init_seed, torch_seed, self._buffer_seed, self._env_seed, noise_seed, rng_seed = (
            int(s) for s in np.random.SeedSequence(seed).generate_state(6))
        self.rng = np.random.default_rng(rng_seed)
        self.torch_rng = torch.Generator(device=self.device).manual_seed(torch_seed)
        if action_noise is not None and not action_noise.seeded:
            # a noise its user did not seed follows the model's seed, anew for each model it is given to (in SB3 it
            # draws from numpy's global generator, which the model's seed resets)
            action_noise.follow_seed(noise_seed)

        self.env = None
        self._raw_env = None
        if env is not None:
            self._raw_env = make_env(env, n_envs)
            self.env = as_env_adapter(self._raw_env)
            observation_space, action_space = self.env.observation_space, self.env.action_space
        elif observation_space is None or action_space is None:
            raise ValueError("give an env, or observation_space and action_space for a model without one")
        self._check_spaces(observation_space, action_space)
        _check_noise_shape(action_noise, action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_envs = self.env.n_envs if self.env is not None else 1

        keys = input_keys(observation_space, self.policy_config.input_keys)
        if isinstance(observation_space, spaces.Dict):  # saved as resolved: a file says what its networks read
            self.policy_config = dataclasses.replace(self.policy_config, input_keys=keys)
        self.policy_config = _resolve_extractor(policy, self.policy_config, observation_space, keys)
        self.check_policy_config(self.policy_config)
        reads_images = self.policy_config.features_extractor is not None and has_images(observation_space, keys)
        normalize = self.config.normalize_observations
        if normalize is None:
            normalize = is_goal_space(observation_space) and not reads_images
        elif normalize and reads_images:
            raise ValueError(f"normalize_observations=True with image observations read by the features extractor "
                             f"{self.policy_config.features_extractor}: the network scales images itself "
                             "(policy_kwargs normalize_images); set normalize_observations=False")
        self.encoder = ObservationEncoder(observation_space, normalize=normalize, clip_range=self.config.clip_observations,
                                          keys=keys if isinstance(observation_space, spaces.Dict) else None)
        self._target_bounds = self.config.target_bounds()
        self.nets = Policy(self, {"encoder": self.encoder})
        self.policy = self.nets  # SB3's name: users read model.policy.actor, .state_dict(), .predict(...)
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._assigned_optimizers: dict[str, str] = {}  # name -> class, for those a user assigned (policy.optimizer)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)  # for any layer that initializes itself from the global generator
            self._build(torch.Generator().manual_seed(init_seed))
        # an extractor may hold layers that act differently in training (batch norm, dropout): the networks act in
        # eval mode, train in training mode, and target networks stay in eval mode (SB3's modes)
        self._mode_dependent = any(has_features(m) for m in self.nets.values())
        for name in ("actor_target", "critic_target", "q_net_target"):
            if self._mode_dependent and name in self.nets:
                self.nets[name].train(False)
        set_precision(self.nets, self.policy_config.precision)
        self.nets.to(self.device)
        self.nets._bind_acting_networks()  # model.actor.predict / model.q_net.predict, as SB3's
        self._make_optimizers()
        self._train_info: dict[str, torch.Tensor | float] = {}  # the last update's losses, read at log time

        self.num_timesteps = 0
        self._n_updates = 0
        self._next_loss_check = LOSS_CHECK_EVERY
        self._episode_num = 0
        self._total_timesteps = 0
        self._current_progress_remaining = 1.0
        self._last_obs = None  # the loop's state between learn calls: observations to act from next,
        self._ep_returns = np.zeros(self.n_envs)  # the running episodes' returns and lengths,
        self._ep_lengths = np.zeros(self.n_envs, dtype=np.int64)
        self.ep_info_buffer: deque[dict[str, float]] = deque(maxlen=self.config.stats_window_size)  # and the last episodes'
        self.ep_success_buffer: deque[float] = deque(maxlen=self.config.stats_window_size)
        self._env_was_seeded = False
        self.logger: Logger | None = None
        self._custom_logger = False
        self.replay_buffer: ReplayBuffer | None = None
        if self.env is not None:
            self.replay_buffer = self._make_replay_buffer()
        self._hyperparameters_live = True  # from here, model.<hyperparameter> = v changes the config (__setattr__)

    updates_priorities: ClassVar[bool] = False
    """Whether the update weighs its loss by a prioritized buffer's importance weights and feeds back its TD errors as
    priorities (DQN); other algorithms refuse ``prioritized=True``."""

    # ------------------------------------------------------------------ hyperparameters as attributes (SB3)
    fixed_hyperparameters: ClassVar[frozenset[str]] = frozenset(
        {"normalize_observations", "clip_observations", "buffer_size", "n_steps"})
    """Hyperparameters that shape what the constructor built (the encoder, the replay buffer, networks): they read as
    attributes but are set only at construction or load."""

    def __getattr__(self, name: str) -> Any:
        """``model.gamma``, ``model.batch_size``, ...: the hyperparameters read as attributes, as in SB3."""
        config = self.__dict__.get("config")
        if config is not None and name in _field_names(type(config)):
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """``model.gamma = 0.95`` changes the hyperparameter that training reads (SB3 users set them so), checked as
        the constructor checks it; one that shaped what was built (:attr:`fixed_hyperparameters`) is refused."""
        if self.__dict__.get("_hyperparameters_live") and name in _field_names(self.config_class):
            self.set_hyperparameters(**{name: value})
        else:
            object.__setattr__(self, name, value)

    def set_hyperparameters(self, **values: Any) -> None:
        """Change hyperparameters of a built model (``model.learning_rate = 1e-4`` does the same for one): the config
        is rebuilt and checked, and what the model derived from it (the optimizers' step sizes, TD-target bounds, the
        n-step buffer's discount, ...) follows."""
        fixed = sorted(set(values) & self.fixed_hyperparameters)
        if fixed:
            raise AttributeError(
                f"{type(self).__name__}'s {', '.join(fixed)} shaped the networks or the replay buffer when the model was "
                f"built: pass it to the constructor, or to {type(self).__name__}.load(path, env=..., {fixed[0]}=...)")
        old = self.config
        current = {name: getattr(old, name) for name in _field_names(type(old))}
        object.__setattr__(self, "config", self.config_class.from_kwargs({**current, **values}))
        self._config_changed(old)

    def _config_changed(self, old: OffPolicyConfig) -> None:
        """Bring what the model derived from ``old`` (its config before a change) in line with ``self.config``."""
        cfg = self.config
        if cfg.learning_rate != old.learning_rate:
            for optimizer in self.optimizers.values():
                for group in optimizer.param_groups:
                    if group["lr"] == old.learning_rate:  # TD3's own actor or critic rate, when given, stays
                        group["lr"] = cfg.learning_rate
        self._target_bounds = cfg.target_bounds()
        buffer = self.replay_buffer
        if buffer is not None and getattr(buffer, "n_steps", 1) > 1 and buffer.gamma == old.gamma:
            buffer.gamma = cfg.gamma
        if cfg.stats_window_size != old.stats_window_size:
            self.ep_info_buffer = deque(self.ep_info_buffer, maxlen=cfg.stats_window_size)
            self.ep_success_buffer = deque(self.ep_success_buffer, maxlen=cfg.stats_window_size)

    # ------------------------------------------------------------------ what algorithms define
    @classmethod
    def check_policy_config(cls, policy_config: PolicyConfig) -> None:
        """Raise ValueError for network settings this algorithm cannot build (also run by ``herl train`` before
        any env is made)."""

    def _build(self, generator: torch.Generator) -> None:
        raise NotImplementedError

    def _make_optimizers(self) -> None:
        """Called once the networks are on the device (fused Adam needs its parameters there)."""
        raise NotImplementedError

    def _act(self, x: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Actions in the policy's scale for normalized inputs ``x``: the noise drawn, then :meth:`_act_from`."""
        return self._act_from(x, self._act_noise(x.shape[0], deterministic))

    def _act_noise(self, n: int, deterministic: bool) -> torch.Tensor | None:
        """What acting draws from the model's generator for ``n`` rows (SAC's Gaussian noise), or None."""
        return None

    def _act_from(self, x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """Actions for normalized inputs and the drawn noise: tensors only (``compile=True`` compiles it)."""
        raise NotImplementedError

    def _update(self, batch: Any) -> None:
        """One gradient step: the loss (compiled with ``compile=True``), one backward pass, one Adam step, then what
        follows it (target updates, priorities).

        An algorithm defines ``_update_inputs(batch)``: what the step draws from the model's generator and decides in
        Python (noise, whether the actor or the targets update), drawn eagerly so a compiled loss neither touches the
        generator nor depends on counters; ``_losses(batch, inputs)``: the loss and the values to log, from tensors
        only, after the normalizer took the batch in (``_take_in``); and, where they apply, ``_target_updates(inputs)``,
        ``_after_step(batch, inputs, info)`` (what ``train_info`` becomes), ``_grad_clip_norm()`` and
        ``_parameters_left_out(inputs)``.
        """
        if self._reshape_actions:
            batch = self._network_batch(batch)
        inputs = self._update_inputs(batch)
        targets = self._target_updates(inputs)
        fused = self._fused_step()
        if fused is None:
            info = self._loss_step(batch, inputs, targets)
        else:
            try:
                info = fused(batch, inputs, targets)
            except Exception as err:  # noqa: BLE001 - narrowed by _recompile_failed
                self._recompile_failed(err)
                info = self._loss_step(batch, inputs, targets)
        self._train_info = self._after_step(batch, inputs, info)

    def _recompile_failed(self, err: Exception) -> None:
        """A compiled update's later graph (a new batch size, or a branch such as a delayed actor update) that the
        compiler failed to build: raised again unless it is a compiler failure, which (as at the first call) leaves
        the model unchanged; then it warns and the model trains on with the eager update."""
        from torch._dynamo.exc import BackendCompilerFailed

        if not isinstance(err, BackendCompilerFailed):
            raise err
        self._compile_failed(err, stacklevel=6)
        self.__dict__["_fused"] = False
        self.__dict__["_compiled_losses"] = self._losses  # no second try with the loss alone

    def _loss_step(self, batch: Any, inputs: Any, targets: tuple[tuple[nn.Module, nn.Module, float], ...]) -> dict[str, Any]:
        """The step with the loss eager or compiled alone: then autograd, clipping, the optimizer's own step and the
        ``(target, source, tau)`` targets' :meth:`soft_update`."""
        self._take_in(batch)
        losses = self._loss_function()
        if losses == self._losses:
            loss, info = losses(batch, inputs)
        else:
            try:
                loss, info = self._compiled_call(losses, batch, inputs)
            except Exception as err:  # noqa: BLE001 - narrowed by _recompile_failed
                self._recompile_failed(err)
                loss, info = self._losses(batch, inputs)
        optimizer = self.optimizers["optimizer"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._before_step()
        optimizer.step()
        for target, source, tau in targets:
            self.soft_update(target, source, tau)
        return info

    @property
    def _reshape_actions(self) -> bool:
        """Whether stored actions differ from what the networks read: a Box of float64 (or float16), or of more than
        one dimension, is stored in its own dtype and shape."""
        space = self.action_space
        return isinstance(space, spaces.Box) and (space.dtype != np.float32 or len(space.shape) != 1)

    def _network_batch(self, batch: Any) -> Any:
        """The batch as the networks read it: actions flat, ``(batch, action_dim)``, in float32."""
        actions = batch.actions
        return batch._replace(actions=actions.reshape(actions.shape[0], -1).to(torch.float32))

    def _update_inputs(self, batch: Any) -> Any:
        raise NotImplementedError

    def _losses(self, batch: Any, inputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def _before_step(self) -> None:
        """Between the backward pass and Adam's step: clips the gradients to ``_grad_clip_norm()``, if any."""
        norm = self._grad_clip_norm()
        if norm is not None:
            params = [p for group in self.optimizers["optimizer"].param_groups for p in group["params"]]
            nn.utils.clip_grad_norm_(params, norm, foreach=True)

    def _grad_clip_norm(self) -> float | None:
        """The norm the gradients of a step are clipped to (all of the optimizer's together), or None."""
        return None

    def _parameters_left_out(self, inputs: Any) -> set[int]:
        """``id`` of each trained parameter the step with these ``inputs`` leaves as it is (its loss does not reach
        it, so the eager step finds no gradient for it and Adam passes it by); the compiled whole step (see
        :mod:`herl.training.fused_step`) must be told. TD3 leaves its actor out between delayed updates."""
        return set()

    def _target_updates(self, inputs: Any) -> tuple[tuple[nn.Module, nn.Module, float], ...]:
        """The target networks that follow their networks after the step with these ``inputs``, as ``(target,
        source, tau)``: :meth:`soft_update` after Adam's step (the compiled whole step does it in its graph)."""
        return ()

    def _after_step(self, batch: Any, inputs: Any, info: dict[str, Any]) -> dict[str, Any]:
        """What ``train_info`` becomes after the step: ``info`` by default."""
        return info

    compile_seconds: float | None = None
    """How long compiling the update took (``compile=True``), once it has run; None before."""

    @property
    def device(self) -> torch.device:
        """Where the networks are and where sampled batches go."""
        return self._device

    @device.setter
    def device(self, device: torch.device | str) -> None:
        """``model.device = "cuda"`` (SB3 code assigns it) resolves as the constructor's ``device`` does (CUDA on a
        machine without it: the CPU, with a warning) and moves the model there: networks, optimizer states, the
        generator of its random draws (reseeded from its own next draw) and where the replay buffer's samples go.
        Training goes on from the same weights; its random draws differ from those of a model that never moved."""
        resolved = get_device(device, stacklevel=4)  # the user's line, past this setter and __setattr__
        current = self.__dict__.get("_device")
        object.__setattr__(self, "_device", resolved)
        if current is not None and resolved != current and "nets" in self.__dict__:
            self._move_to(resolved)

    def _move_to(self, device: torch.device) -> None:
        self.nets.to(device)
        for optimizer in self.optimizers.values():
            optimizer.load_state_dict(optimizer.state_dict())  # torch places each state tensor with its parameter
            _shape_optimizer_state(optimizer)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.torch_rng, device=self.torch_rng.device).item())
        self.torch_rng = torch.Generator(device=device).manual_seed(seed)
        for compiled in ("_compiled_losses", "_fused", "_acting"):  # compiled for the old device: anew at the next use
            self.__dict__.pop(compiled, None)
        if self.replay_buffer is not None and hasattr(self.replay_buffer, "device"):
            self.replay_buffer.device = device

    def _fused_step(self) -> Callable[[Any, Any], dict[str, Any]] | None:
        """With ``compile=True``: the whole step compiled as one function (:mod:`herl.training.fused_step`;
        built at the first update, and timed), where the model allows it; else None."""
        if not self.config.compile:
            return None
        fused = self.__dict__.get("_fused")
        if fused is None:
            if fused_step_unsupported(self) is not None:
                self.__dict__["_fused"] = False
                return None
            fused = self.__dict__["_fused"] = FusedStep(self)
            return functools.partial(self._first_fused_call, fused)
        return fused or None

    def _first_fused_call(self, fused: Any, batch: Any, inputs: Any, targets: Any) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            info = first_call(fused, batch, inputs, targets)
        except Exception as err:  # noqa: BLE001 - any compiler failure: train on, eagerly, and say why
            self._compile_failed(err)
            self.__dict__["_fused"] = False
            self.__dict__["_compiled_losses"] = self._losses  # no second try with the loss alone
            return self._loss_step(batch, inputs, targets)
        self._compiled(start)
        return info

    def _loss_function(self) -> Callable[[Any, Any], tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """``_losses``, or its compiled version with ``compile=True`` (built at the first update, and timed)."""
        if not self.config.compile:
            return self._losses
        compiled = self.__dict__.get("_compiled_losses")
        if compiled is None:
            compiled = compile_update(self._losses, cuda=self.device.type == "cuda")
            self.__dict__["_compiled_losses"] = compiled
            return functools.partial(self._first_compiled_call, compiled)
        return compiled

    def _compiled_call(self, losses: Any, batch: Any, inputs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """The compiled loss. On CUDA its graphs (CUDA graphs) reuse their output memory at the next call: each call
        starts a new step, and the values kept for logging are copied out."""
        if self.device.type != "cuda":
            return losses(batch, inputs)
        torch.compiler.cudagraph_mark_step_begin()
        loss, info = losses(batch, inputs)
        return loss, {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in info.items()}

    def _first_compiled_call(self, compiled: Any, batch: Any, inputs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        start = time.perf_counter()
        try:
            out = first_call(compiled, batch, inputs)
        except Exception as err:  # noqa: BLE001 - any compiler failure: train on, eagerly, and say why
            self._compile_failed(err)
            self.__dict__["_compiled_losses"] = self._losses
            return self._losses(batch, inputs)
        self._compiled(start)
        return out

    def _compile_failed(self, err: Exception, what: str = "the update", stacklevel: int = 5) -> None:
        warnings.warn(f"{type(self).__name__}(compile=True): torch.compile could not compile {what} "
                      f"({type(err).__name__}: {str(err)[:300]}); training goes on with the eager {what.split()[-1]}, "
                      "which computes the same", RuntimeWarning, stacklevel=stacklevel)

    def _compiled(self, start: float) -> None:
        self.compile_seconds = time.perf_counter() - start
        if self.verbose >= 1:
            print(f"{type(self).__name__}: compiled the update in {self.compile_seconds:.1f} s")

    def _compiled_acting(self) -> Callable[[torch.Tensor, Any], torch.Tensor] | None:
        """With ``compile=True`` on a CPU: the actions of training's env steps from one compiled function (the
        normalizer and the actor; the noise is drawn eagerly, from the model's generator), or None. An eager actor
        makes a few dozen small ops per env step, each a few microseconds on a CPU core: compiled, SAC's action at
        [64, 64] took 138 against 219 us. Evaluation and :meth:`predict` stay eager (their batch sizes vary). Models
        whose networks act differently in eval mode (batch norm, dropout) act eagerly."""
        if not self.config.compile or self.device.type != "cpu" or self._mode_dependent \
                or type(self)._act is not OffPolicyAlgorithm._act:
            return None
        acting = self.__dict__.get("_acting")
        if acting is None:
            acting = self.__dict__["_acting"] = compile_update(self._normalized_act, cuda=False)
            return functools.partial(self._first_acting_call, acting)
        return acting or None

    def _normalized_act(self, x: torch.Tensor, noise: Any) -> torch.Tensor:
        """What :meth:`_compiled_acting` compiles: the normalizer, then :meth:`_act_from`."""
        return self._act_from(self.encoder.normalize(x), noise)

    def _first_acting_call(self, compiled: Any, x: torch.Tensor, noise: Any) -> torch.Tensor:
        try:
            return first_call(compiled, x, noise)
        except Exception as err:  # noqa: BLE001 - any compiler failure: act eagerly, and say why
            self._compile_failed(err, "acting", stacklevel=6)
            self.__dict__["_acting"] = False
            return self._normalized_act(x, noise)

    # ------------------------------------------------------------------ helpers for algorithms
    @property
    def obs_dim(self) -> int:
        return self.encoder.dim

    def _make_features(self) -> tuple[nn.Module, ExtractorInput] | None:
        """A new features extractor of the policy's settings and what feeds it, or None (herl's flat inputs)."""
        arch = self.policy_config
        if arch.features_extractor is None:
            return None
        return make_extractor(extractor_class(arch.features_extractor), arch.features_extractor_kwargs,
                              self.observation_space, self.encoder.keys, arch.normalize_images)

    def _network_inputs(self) -> tuple[tuple[nn.Module, ExtractorInput] | None, tuple[nn.Module, ExtractorInput] | None]:
        """The actor's and the critics' extractors (the same one with ``share_features_extractor``), or Nones."""
        actor = self._make_features()
        critic = actor if actor is not None and self.policy_config.share_features_extractor else self._make_features()
        return actor, critic

    def _in_dim(self, features: tuple[nn.Module, ExtractorInput] | None) -> int:
        return self.obs_dim if features is None else int(features[0].features_dim)

    def _critic_inputs(self, x: torch.Tensor, next_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the critics read for the observations and the next observations, and what the actor's loss reads
        through them: the flat inputs themselves, or the critic's and target critic's extractor features (the
        actor's loss sees them as constants; a shared extractor learns from the actor's loss only, as in SB3)."""
        critic = self.critic
        if not has_features(critic):
            return x, next_x, x
        with torch.no_grad():
            next_cx = self.critic_target.features(next_x)
        if self.policy_config.share_features_extractor:
            with torch.no_grad():
                cx = critic.features(x)
            return cx, next_cx, cx
        cx = critic.features(x)
        return cx, next_cx, cx.detach()

    @staticmethod
    def unique_parameters(*modules: nn.Module) -> list[nn.Parameter]:
        """The parameters of ``modules``, each once (an extractor shared by two networks is in both)."""
        seen: dict[int, nn.Parameter] = {}
        for module in modules:
            for p in module.parameters():
                seen.setdefault(id(p), p)
        return list(seen.values())

    @property
    def action_dim(self) -> int:
        return math.prod(self.action_space.shape)  # read at each env step and update: NumPy's prod costs ~10 us

    def make_optimizer(self, params: Any, lr: float | None = None,
                       betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.Optimizer:
        """The model's optimizer over ``params``: Adam with one fused kernel per step where the device supports it
        (0.85 -> 0.67 ms per critic step on CPU), or the class ``policy_kwargs`` name with their ``optimizer_kwargs``
        (:mod:`herl.training.optimizers`); ``betas`` are the algorithm's, for Adam-like classes."""
        from herl.training.optimizers import build_optimizer

        lr = self.config.learning_rate if lr is None else lr
        name, kwargs = self.policy_config.optimizer_class, self.policy_config.optimizer_kwargs
        try:
            return build_optimizer(name, kwargs, params, lr, betas)
        except (TypeError, ValueError) as err:
            if name is None and not kwargs:
                raise
            raise ValueError(f"policy_kwargs optimizer_class={name or 'Adam'!r} with optimizer_kwargs={dict(kwargs)!r} "
                             f"cannot be built: {err}") from None

    def _take_in(self, batch: Any) -> None:
        """The normalizer takes the batch's observations in, before the loss reads them normalized: most of their
        desired goals are relabeled ones, the goals the networks are trained on (HER pitfall 9)."""
        self.encoder.update(self.encoder.flatten(batch.observations))

    def encode_batch(self, batch: Any) -> torch.Tensor:
        """Normalized network inputs of a batch: observations stacked over next observations, ``(2 * batch, dim)``
        (the update took the batch's observations into the normalizer first: :meth:`_take_in`)."""
        x = self.encoder.flatten(batch.observations)
        return self.encoder.normalize(torch.cat([x, self.encoder.flatten(batch.next_observations)]))

    @torch.no_grad()
    def q_estimates(self, batch: Any) -> torch.Tensor | None:
        """The critics' estimates ``(batch,)`` for a batch's observations and actions (averaged over critics
        and atoms), without updating any statistics; None for an algorithm without ``critic``."""
        critic = getattr(self, "critic", None)
        if critic is None:
            return None
        if self._reshape_actions:
            batch = self._network_batch(batch)
        x = self.encoder.normalize(self.encoder.flatten(batch.observations))
        training = critic.training
        critic.train(False)  # CrossQ's batch renormalization: running statistics, left as they are
        try:
            with self.eval_mode():
                features = critic.features(x) if has_features(critic) else x
                q = critic(torch.cat([features, batch.actions.to(x.dtype)], dim=1))
        finally:
            critic.train(training)
        return q.reshape(q.shape[0], x.shape[0], -1).mean(dim=(0, 2))

    def _clip_target(self, target: torch.Tensor) -> torch.Tensor:
        return target if self._target_bounds is None else target.clamp_(*self._target_bounds)

    def td_target(self, batch: Any, next_values: torch.Tensor) -> torch.Tensor:
        """``r + gamma (1 - done) next_values``, clipped; an n-step batch carries its own discounts (gamma^m, m the
        steps summed into its reward), which replace gamma."""
        if batch.discounts is None:
            target = torch.addcmul(batch.rewards, 1.0 - batch.dones, next_values, value=self.config.gamma)
        else:
            target = torch.addcmul(batch.rewards, (1.0 - batch.dones) * batch.discounts, next_values)
        return self._clip_target(target)

    @staticmethod
    @torch.no_grad()
    def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
        """Polyak averaging ``target <- (1 - tau) target + tau source`` in one fused op; a features extractor's
        running statistics (batch norm) are copied whatever ``tau`` (SB3 does so)."""
        torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)
        if has_features(source):
            for target_buffer, buffer in zip(target.buffers(), source.buffers()):
                target_buffer.copy_(buffer)

    # ------------------------------------------------------------------ spaces, envs, buffer
    def _check_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        if not isinstance(action_space, self.action_space_types):
            names = " or ".join(t.__name__ for t in self.action_space_types)
            fix = action_space_fix(action_space)
            hint = (": use DQN for Discrete actions" if isinstance(action_space, spaces.Discrete) else
                    ": use SAC, TD3, DDPG, TQC or CrossQ for Box actions" if isinstance(action_space, spaces.Box) else
                    f"; {fix}")
            raise ActionSpaceError(f"{type(self).__name__} needs a {names} action space, got {action_space}{hint}")
        if isinstance(action_space, spaces.Box) and not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ActionSpaceError(f"{type(self).__name__} needs a bounded Box action space (finite low and high), got "
                                   f"{action_space}")
        if isinstance(action_space, spaces.Box) and not np.issubdtype(action_space.dtype, np.floating):
            # its actions would be cast to whole numbers: within (-1, 1), every one of them 0
            raise ActionSpaceError(f"{type(self).__name__} acts in real numbers, and the action space {action_space} "
                                   "holds whole numbers: give the env a float32 Box and round its actions in the env, "
                                   "or, for a few choices, a Discrete action space and DQN")

    def _make_replay_buffer(self) -> ReplayBuffer:
        kwargs = dict(self.replay_buffer_kwargs)
        kwargs.setdefault("seed", self._buffer_seed)
        if issubclass(self.replay_buffer_class, HerReplayBuffer):
            kwargs.setdefault("env", self._raw_env)
        n_steps = self.config.n_steps
        if n_steps > 1:  # unlike SB3, any herl buffer takes them (HER included), not only the default one
            if kwargs.get("n_steps", n_steps) != n_steps:
                raise ValueError(f"n_steps={n_steps} but replay_buffer_kwargs has n_steps={kwargs['n_steps']}: give one of them")
            kwargs.update(n_steps=n_steps, gamma=kwargs.get("gamma", self.config.gamma))
        buffer_class = self.replay_buffer_class
        if buffer_class is ReplayBuffer and n_steps > 1:  # the same buffer, under the class name SB3 gives it
            buffer_class = NStepReplayBuffer
        _check_buffer_arguments(buffer_class, kwargs)
        buffer = buffer_class(
            self.config.buffer_size, self.observation_space, self.action_space,
            device=self.device, n_envs=self.n_envs, **kwargs,
        )
        check_n_step_gamma(self, buffer)
        check_demonstrations(self, buffer)
        return buffer

    def get_env(self) -> Any:
        """The training env as a Stable-Baselines3 VecEnv, as SB3 returns it (None if there is none): an SB3 VecEnv
        you gave is returned itself; any other env (given to the constructor, :meth:`set_env` or :meth:`load`) through
        a :class:`herl.training.envs.VecEnv` view, the same object until :meth:`set_env`. Stepping it is safe: the next
        ``learn`` resets the env first (see that class)."""
        return None if self.env is None else self.env.vec_env()

    def get_vec_normalize_env(self) -> Any:
        """The SB3 ``VecNormalize`` wrapping the training env, or None (SB3's method)."""
        return None if self.env is None else self.env.normalizer

    def set_env(self, env: Any, force_reset: bool = True) -> None:
        """Train on ``env`` from now on; its spaces must be the model's."""
        raw = make_env(env)
        adapter = as_env_adapter(raw)
        if adapter.observation_space != self.observation_space or adapter.action_space != self.action_space:
            raise ValueError(
                f"the env's spaces differ from the model's: observation {adapter.observation_space} vs "
                f"{self.observation_space}, action {adapter.action_space} vs {self.action_space}"
            )
        if self.replay_buffer is not None and adapter.n_envs != self.n_envs:
            raise EnvMismatchError(f"the replay buffer was made for {self.n_envs} env(s), this env has {adapter.n_envs}: "
                                   f"give an env of {self.n_envs}, or a new model for {adapter.n_envs}")
        if self.replay_buffer is None:  # built first: a buffer that cannot be built leaves the model as it was
            previous = self._raw_env, self.env, self.n_envs
            self._raw_env, self.env, self.n_envs = raw, adapter, adapter.n_envs
            try:
                new_buffer = self._make_replay_buffer()
            finally:
                self._raw_env, self.env, self.n_envs = previous
        self._raw_env, self.env, self.n_envs = raw, adapter, adapter.n_envs
        if force_reset or self._ep_returns.shape != (self.n_envs,):
            if self._last_obs is not None and hasattr(self.replay_buffer, "truncate_last_trajectory"):
                # the running episodes end here (the next learn resets the new env): close them as truncated, so
                # that HER never draws a future goal across the change, as a model loaded with this env has them
                self.replay_buffer.truncate_last_trajectory(warn=False)
            self._last_obs = None
            self._env_was_seeded = False
        if self.replay_buffer is None:
            self.replay_buffer = new_buffer
        elif isinstance(self.replay_buffer, HerReplayBuffer):
            self.replay_buffer.set_env(raw)

    def _first_reset_seed(self) -> int:
        """The seed of the first reset of an env this model has not reset yet.

        A model's first env gets the env seed its ``seed`` fixes. An env given after training began (``set_env``, or
        ``load(..., env=)``) gets one drawn from the model's generator, whose state the model file keeps: a loaded
        model and the one it was saved from, each given a new env, reset them alike and train on identically, and
        the new env does not replay the goals of the run's first episodes.
        """
        if self.num_timesteps == 0:
            return self._env_seed
        return int(self.rng.integers(2**32))

    # ------------------------------------------------------------------ acting
    def _unscale(self, actions: np.ndarray) -> np.ndarray:
        """Policy actions in [-1, 1] to the env's action bounds (Discrete actions pass through as ints)."""
        space = self.action_space
        if isinstance(space, spaces.Box):
            return (space.low + 0.5 * (actions + 1.0) * (space.high - space.low)).astype(space.dtype, copy=False)
        return actions.reshape(actions.shape[0]) + space.start

    def _random_actions(self, n: int) -> np.ndarray:
        """Uniform actions in the policy's scale: [-1, 1] boxes, or action indices shaped (n, 1)."""
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return self.rng.integers(space.n, size=(n, 1))
        return self.rng.uniform(-1.0, 1.0, size=(n, *space.shape)).astype(np.float32)

    def _policy_actions(self, obs: Any, deterministic: bool, *, collecting: bool = False) -> np.ndarray:
        """Actions of the current policy for a batch of raw observations, in the policy's scale. ``collecting``:
        for training's env steps, which ``compile=True`` compiles on a CPU (see :meth:`_compiled_acting`)."""
        with torch.no_grad():
            x = self.encoder.flatten_numpy(obs, self.device)
            acting = self._compiled_acting() if collecting else None
            if acting is not None:
                actions = acting(x, self._act_noise(x.shape[0], deterministic))
            else:
                with self.eval_mode():
                    actions = self._act(self.encoder.normalize(x), deterministic)
        actions = actions.cpu().numpy()
        if self._reshape_actions:  # a Box of several dimensions: the networks' flat actions in its shape
            actions = actions.reshape(actions.shape[0], *self.action_space.shape)
        return actions

    @contextlib.contextmanager
    def _extractor_randomness(self, gradient_steps: int) -> Iterator[None]:
        """A features extractor's random layers (dropout) draw from torch's global generator: while training, it is
        seeded from the model's own, so a saved and loaded model trains on exactly as the original (the global
        generator is left as it was)."""
        if not self._mode_dependent or gradient_steps <= 0:
            yield
            return
        seed = int(torch.randint(0, 2**62, (1,), generator=self.torch_rng, device=self.torch_rng.device).item())
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    @contextlib.contextmanager
    def eval_mode(self) -> Iterator[None]:
        """The networks in eval mode inside (an extractor's batch norm and dropout act so; nothing else differs)."""
        if not self._mode_dependent:
            yield
            return
        modes = [(m, m.training) for m in self.nets.values()]
        self.nets.train(False)
        try:
            yield
        finally:
            for m, mode in modes:
                m.train(mode)

    def _collect_actions(self, obs: Any) -> np.ndarray:
        """Actions to explore with during training (SB3's ``_sample_action``): random before
        ``learning_starts``, then the stochastic policy or the deterministic one plus noise."""
        if self.num_timesteps < self.config.learning_starts:
            return self._random_actions(self.n_envs)
        actions = self._policy_actions(obs, deterministic=False, collecting=True)
        if self.action_noise is not None:
            actions = np.clip(actions + self.action_noise.sample(len(actions)), -1.0, 1.0).astype(np.float32)
        return actions

    def _mix_random_actions(self, actions: np.ndarray, p: float) -> np.ndarray:
        """Replace each exploration action by a uniformly random one with probability ``p`` once ``learning_starts``
        is past (OpenAI baselines' HER DDPG; SB2's ``random_exploration``)."""
        if p and self.num_timesteps >= self.config.learning_starts:
            pick = self.rng.random(len(actions)) < p
            if pick.any():
                actions[pick] = self._random_actions(int(pick.sum()))
        return actions

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """Actions for one observation or a batch (leading axis), in the env's action space; ``state`` is returned as given."""
        batched = self._is_batch(observation)
        obs = observation if batched else _add_batch_axis(observation)
        self._check_observation(obs, batched=batched)
        actions = self._unscale(self._policy_actions(obs, deterministic))
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.astype(np.int64)
        return (actions if batched else actions[0, ...]), state  # one observation: an array, 0-d for Discrete (as SB3)

    def _check_observation(self, obs: Any, *, batched: bool = True) -> None:
        """Every entry the networks read is there, numeric, and shaped (batch, *its space's shape), with one batch
        size: the message names the key and the expected shape (rather than a shape error from inside torch). And
        finite: NaN or infinity gave a NaN action (SAC) or action 0 (DQN), silently; the message names the key and the
        index (one reduction per entry when all is well)."""
        space = self.observation_space
        entries = {k: (space[k], obs.get(k) if isinstance(obs, Mapping) else None) for k in self.encoder.keys} \
            if isinstance(space, spaces.Dict) else {"observation": (space, obs)}
        batch = None
        for key, (sub, value) in entries.items():
            expected = () if isinstance(sub, spaces.Discrete) else tuple(sub.shape)
            if value is None:
                raise ValueError(f"the observation lacks the key {key!r}: the model reads {list(self.encoder.keys)}")
            array = value if torch.is_tensor(value) else np.asarray(value)
            numeric = array.dtype.is_floating_point or not array.dtype.is_complex if torch.is_tensor(array) \
                else array.dtype.kind in "biuf"
            if not numeric or tuple(array.shape[1:]) != expected or (batch is not None and array.shape[0] != batch):
                raise ValueError(f"observation[{key!r}] has shape {tuple(array.shape)} and dtype {array.dtype}; expected "
                                 f"numbers shaped {expected} for one observation, or (batch, *{expected}) for a batch"
                                 + (f" of {batch}" if batch is not None else ""))
            batch = array.shape[0]
            _check_finite_observation(array, f"observation[{key!r}]" if isinstance(space, spaces.Dict) else "observation",
                                      batched)

    def _is_batch(self, observation: Any) -> bool:
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            if not isinstance(observation, Mapping):
                raise ValueError(f"expected a dict observation with keys {sorted(space.spaces)}, got {type(observation).__name__}")
            key = self.encoder.keys[0]
            sub, value = space[key], np.asarray(observation[key])
        else:
            sub, value = space, np.asarray(observation)
        single_ndim = 0 if isinstance(sub, spaces.Discrete) else len(sub.shape)
        if value.ndim == single_ndim:
            return False
        if value.ndim == single_ndim + 1:
            return True
        raise ValueError(f"observation has shape {value.shape}; the space's is {sub.shape}: pass one observation or a batch of them")

    # ------------------------------------------------------------------ learning
    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int = 4, tb_log_name: str | None = None,
              reset_num_timesteps: bool = True, progress_bar: bool = False):
        """Train for ``total_timesteps`` env steps (counting every env of a vector env); returns the model."""
        from herl.training.loop import run

        if self.env is None:
            raise ValueError("this model has no env to learn from: pass one to load(..., env=env) or call set_env(env)")
        total_timesteps = as_integer(type(self).__name__, "total_timesteps", total_timesteps, NON_NEGATIVE_INT)
        check_demonstrations(self, self.replay_buffer)  # the buffer may have been replaced since construction
        check(type(self).__name__, "log_interval", log_interval, integer(0, also=(None,)))
        warn_if_threads_wait(self.device)
        with flush_denormals():  # Adam's moments decay into denormals, which CPUs compute with slowly
            return run(self, total_timesteps, callback=callback, log_interval=log_interval,
                       tb_log_name=tb_log_name or type(self).__name__, reset_num_timesteps=reset_num_timesteps,
                       progress_bar=progress_bar)

    @property
    def lr_schedule(self) -> Callable[[float], float]:
        """SB3's learning-rate schedule: the progress remaining (1 at the start of ``learn``, 0 at its end) to the
        learning rate; the constant ``learning_rate`` unless one is set. ``model.lr_schedule = fn`` makes each
        :meth:`train` call set the optimizers' step size to ``fn(progress remaining)``, as SB3's does. A schedule is
        code, which herl files never hold: a saved model keeps ``learning_rate`` (saving says so)."""
        schedule = self.__dict__.get("_lr_schedule")
        return schedule if schedule is not None else _ConstantSchedule(self.config.learning_rate)

    @lr_schedule.setter
    def lr_schedule(self, schedule: Callable[[float], float] | float) -> None:
        if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
            schedule = _ConstantSchedule(float(schedule))
        if not callable(schedule):
            raise TypeError(f"lr_schedule must be a function of the progress remaining (1 -> 0) returning the "
                            f"learning rate, or a number; got {schedule!r}")
        self.__dict__["_lr_schedule"] = schedule

    def _apply_lr_schedule(self) -> None:
        schedule = self.__dict__.get("_lr_schedule")
        if schedule is None:
            return
        lr = schedule(self._current_progress_remaining)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            raise ValueError(f"lr_schedule({self._current_progress_remaining}) returned {lr!r}: a learning rate is a "
                             "finite number >= 0")
        for optimizer in self.optimizers.values():
            for group in optimizer.param_groups:
                group["lr"] = float(lr)

    def _on_step(self) -> None:
        """SB3's hook after each env step, which SB3's SAC, TD3 and TQC leave empty; herl's algorithms (DQN too) do
        their per-step work, target updates included, in their updates, so calling it changes nothing."""

    def train(self, gradient_steps: int, batch_size: int | None = None) -> None:
        """``gradient_steps`` updates on batches from the replay buffer."""
        self._apply_lr_schedule()
        batch_size = batch_size or self.config.batch_size
        sample, update = self.replay_buffer.sample, self._update
        vec_normalize = self.get_vec_normalize_env()
        if vec_normalize is not None:  # batches through its statistics, as SB3 samples them
            sample = functools.partial(sample, env=vec_normalize)
        with self._extractor_randomness(gradient_steps):
            for _ in range(gradient_steps):
                update(sample(batch_size))
                self._n_updates += 1
        if self.logger is not None:  # as SB3's train records it (the losses wait for log time)
            self.logger.record("train/n_updates", self._n_updates)
        if self._n_updates >= self._next_loss_check:
            self.check_losses()

    def check_losses(self) -> None:
        """Stop with :class:`~herl.errors.NonFiniteError` if the last update's losses are NaN or infinite.

        Called every :data:`LOSS_CHECK_EVERY` updates and at log time, never per update: reading a loss is a device
        sync (on a GPU, it would stall the queue of kernels every step). Checking the latest values is enough because
        a non-finite loss makes the gradients, hence the weights, non-finite, and they stay so: every later loss is
        non-finite too.
        """
        self._next_loss_check = self._n_updates + LOSS_CHECK_EVERY
        tensors = {k: v for k, v in self._train_info.items() if torch.is_tensor(v)}
        if not tensors or bool(torch.isfinite(torch.stack([v.detach().float().reshape(()) for v in tensors.values()])).all()):
            return
        bad = [k for k, v in tensors.items() if not torch.isfinite(v.detach()).all()]
        terms = ", ".join(f"{LOSS_TERMS.get(k, k.replace('_', ' '))} ({k}={float(v.detach())})"
                          for k, v in tensors.items() if k in bad)
        raise NonFiniteError(
            f"{type(self).__name__}'s {terms} became NaN or infinite by update {self._n_updates} (env step "
            f"{self.num_timesteps}); the networks' weights are no longer finite, so training stops. Usual causes: a "
            "learning_rate too high for the rewards' scale, rewards or observations of huge magnitude (normalize them, "
            "or clip_target=True for -1/0 goal rewards). Continue from a checkpoint taken before this step."
        )

    def last_losses(self) -> dict[str, float]:
        """The last update's losses and coefficients as numbers, unchecked: what a checkpoint keeps, so that the first
        log row after a resume holds what a run never stopped would log (:meth:`set_last_losses` puts them back)."""
        return {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in self._train_info.items()}

    def set_last_losses(self, losses: Mapping[str, float]) -> None:
        """Take the last update's losses from :meth:`last_losses` of the model this one continues."""
        self._train_info = {str(k): float(v) for k, v in losses.items()}

    def train_info(self) -> dict[str, float]:
        """The last update's losses and coefficients, as numbers (one device sync, at log time only)."""
        self.check_losses()
        return {f"train/{k}": v for k, v in self.last_losses().items()}

    def dump_logs(self) -> None:
        """Write the rollout, training and time statistics now (SB3's method; its ``LogEveryNTimesteps`` calls it)."""
        from herl.training.loop import dump_logs

        if self.logger is None:
            raise ValueError("there is nothing to log before learn() starts: call dump_logs from a callback or after learn")
        dump_logs(self, *self.__dict__.get("_log_start", (self.num_timesteps, time.perf_counter())))

    def set_logger(self, logger: Logger) -> None:
        """Log to ``logger`` (e.g. from :func:`herl.training.logger.configure`) instead of the default one."""
        self.logger = logger
        self._custom_logger = True

    # ------------------------------------------------------------------ parameters and files
    def get_parameters(self) -> Parameters:
        """State dicts of every network (``"actor"``, ``"critic"``, ...) and optimizer (``"<name>.optimizer"``);
        ``params["policy"]`` also gives SB3's entry, all networks in one by ``model.policy``'s names (see
        :class:`Parameters`)."""
        # a network without state (an encoder that does not normalize) has no entry, as SB3 lists only what holds
        # tensors
        params = {name: state for name, module in self.nets.items() if (state := module.state_dict())}
        params.update({f"{name}.optimizer": opt.state_dict() for name, opt in self.optimizers.items()})
        return Parameters(params, policy=self.policy.state_dict())

    def set_parameters(self, load_path_or_dict: str | os.PathLike | Mapping[str, Any], exact_match: bool = True,
                       device: torch.device | str = "auto") -> None:
        """Load parameters from :meth:`get_parameters`' dict or from a saved model file."""
        from herl.io.model import fit_param_groups, read_model

        if isinstance(load_path_or_dict, Mapping):
            params = load_path_or_dict
        else:
            params = read_model(load_path_or_dict, expected=type(self).__name__)[1]
        # a network without state (an encoder that does not normalize) needs no entry: there is nothing to load
        required = [name for name, module in self.nets.items() if module.state_dict()]
        missing = [name for name in [*required, *(f"{n}.optimizer" for n in self.optimizers)] if name not in params]
        if exact_match and missing:
            raise ValueError(f"the parameters lack {missing}; pass exact_match=False to load a subset")
        for name, state in params.items():
            if name.endswith(".optimizer"):
                opt_name = name[: -len(".optimizer")]
                if opt_name not in self.optimizers:
                    raise ValueError(f"unknown optimizer {opt_name!r} in the parameters: this model has {sorted(self.optimizers)}")
                optimizer = self.optimizers[opt_name]
                if isinstance(state, Mapping) and "param_groups" in state:  # this torch's and device's own way to step
                    state = {**state, "param_groups": fit_param_groups(state["param_groups"],
                                                                       optimizer.state_dict()["param_groups"])}
                optimizer.load_state_dict(state)
                _shape_optimizer_state(optimizer)
            elif name in self.nets:
                self.nets[name].load_state_dict(state, strict=exact_match)
            elif name == "policy":
                self.policy.load_state_dict(state, strict=exact_match)
            else:
                raise ValueError(f"unknown network {name!r} in the parameters: this model has {sorted(self.nets)}")

    def save(self, path: str | os.PathLike | IO[bytes], exclude: Any = None, include: Any = None) -> None:
        """Write the model (hyperparameters, spaces, weights, optimizer states, normalizer statistics) to ``path``;
        ``save("name")`` writes ``name.zip``, as SB3. ``path`` may be a file object open for binary writing
        (``io.BytesIO``, ``open(name, "wb")``).

        ``exclude`` / ``include`` (SB3's): names of what to leave out of the file or keep in it. The file holds what
        the model needs and nothing else, so the one name they act on is ``"verbose"`` (saved by default, as SB3
        saves it; ``include`` wins over ``exclude``); other names are accepted and change nothing."""
        from herl.io.model import unsaved_kwargs, write_model

        keep_verbose = "verbose" not in (exclude or ()) or "verbose" in (include or ())
        if self.__dict__.get("_lr_schedule") is not None:
            warnings.warn(f"model.lr_schedule ({self.lr_schedule!r}) is code, which herl files never hold: the file "
                          f"keeps learning_rate={self.config.learning_rate}; set model.lr_schedule again after "
                          "loading", UserWarning, stacklevel=2)
        unsaved = unsaved_kwargs(self.replay_buffer_kwargs)
        if unsaved:
            warnings.warn(f"replay_buffer_kwargs {', '.join(map(repr, unsaved))} hold code or objects (a function, "
                          "in-memory demonstrations), which herl files never hold: the model loaded from the file goes "
                          "without them (a compute_reward or compute_terminated: the env's own); pass them again on "
                          "load with replay_buffer_kwargs=dict(...)", UserWarning, stacklevel=2)
        for name, class_name in self._assigned_optimizers.items():
            warnings.warn(f"model.policy.optimizer is an optimizer assigned by hand ({class_name}), which herl files "
                          f"never hold (it is code): the file keeps no {name!r} state, and the model loaded from it "
                          "trains with its own optimizer (herl's Adam, or policy_kwargs' optimizer_class), started "
                          "anew; assign yours again after loading", UserWarning,
                          stacklevel=2)
        write_model(self, path, verbose=keep_verbose)

    def export_onnx(self, path: str | os.PathLike, **kwargs: Any) -> Any:
        """Write the deterministic policy (normalization and action scaling included) as one ONNX graph whose
        inputs are the observation entries; see :mod:`herl.export` (also TorchScript, and a check against
        :meth:`predict`). Returns the path."""
        from herl.export import export_onnx

        return export_onnx(self, path, **kwargs)

    def pretrain(self, dataset: Any, n_epochs: int = 10, learning_rate: float = 1e-4, **kwargs: Any):
        """Behaviour cloning on demonstrations (Stable Baselines' ``pretrain``): ``dataset`` is a
        ``herl.demos.Demonstrations``, a dataset folder or a Minari id; see :mod:`herl.demos.pretrain`. Returns
        the model."""
        from herl.demos.pretrain import pretrain

        pretrain(self, dataset, n_epochs=n_epochs, learning_rate=learning_rate, **kwargs)
        return self

    @classmethod
    def load(cls, path: str | os.PathLike | IO[bytes], env: Any = None, device: torch.device | str = "auto",
             custom_objects: Mapping[str, Any] | None = None, print_system_info: bool = False,
             force_reset: bool = True, **overrides: Any):
        """Read a model saved by :meth:`save` (``load("name")`` finds ``name.zip``, as SB3), or from a file object
        open for binary reading. Without ``env`` it predicts; with one it can continue learning.
        ``print_system_info=True`` first prints this system's versions and those of the one that saved the file.

        ``overrides`` replace saved hyperparameters (e.g. ``learning_starts=0``); an unknown name is an
        error; ``policy_kwargs=dict(...)`` replaces the entries it gives (a features extractor or optimizer class of
        yours that the file names: ``policy_kwargs=dict(optimizer_class=TheClass)``). ``custom_objects`` (SB3's)
        replaces the entries the file holds and ignores the others, as SB3 does (rl-zoo passes ``lr_schedule``,
        ``clip_range``, ... to every algorithm).
        """
        from herl.io import model as model_file
        from herl.training.config import remember_classes

        if isinstance(overrides.get("policy_kwargs"), Mapping):
            remember_classes(overrides["policy_kwargs"])
        if print_system_info:
            path = model_file.model_path(path, reading=True)  # a stream that cannot seek is read once, here
            model_file.print_system_info(path)
        return model_file.load_model(cls, path, env=env, device=device, overrides=overrides, classes=model_classes(),
                                     custom_objects=custom_objects, force_reset=force_reset)

    def save_replay_buffer(self, path: str | os.PathLike | IO[bytes]) -> None:
        if self.replay_buffer is None:
            raise ValueError("this model has no replay buffer (it has no env): nothing to save")
        self.replay_buffer.save(path)

    def load_replay_buffer(self, path: str | os.PathLike | IO[bytes], truncate_last_traj: bool = True) -> None:
        """Replace the replay buffer by one saved with :meth:`save_replay_buffer`. A HER buffer reuses this
        model's env, and the ``compute_reward`` / ``compute_terminated`` of its ``replay_buffer_kwargs``
        (functions are code, never stored in the file)."""
        buffer_class = self.replay_buffer_class
        # a subclass's own settings (the file keeps herl's): the model's, as its buffer was built with them
        own = {k: v for k, v in self.replay_buffer_kwargs.items() if k not in herl_settings(buffer_class)}
        if issubclass(buffer_class, HerReplayBuffer):
            functions = {k: self.replay_buffer_kwargs[k] for k in ("compute_reward", "compute_terminated")
                         if self.replay_buffer_kwargs.get(k) is not None}
            buffer = buffer_class.load(path, env=self._raw_env, device=self.device, **functions, **own)
        else:
            buffer = buffer_class.load(path, device=self.device, **own)
        if buffer.observation_space != self.observation_space or buffer.action_space != self.action_space:
            raise ValueError("the saved replay buffer's spaces differ from the model's")
        if truncate_last_traj and isinstance(buffer, HerReplayBuffer):
            # the env is reset before learning continues: no goal is drawn across it (SB3 closes HER episodes here,
            # with its warning; a plain buffer's running episodes close at the next learn's reset, as SB3 leaves them)
            buffer.truncate_last_trajectory()
        if self.config.n_steps > 1:  # the model's n-step setting applies to the transitions it loads
            buffer.n_steps, buffer.gamma = self.config.n_steps, self.config.gamma
        check_n_step_gamma(self, buffer)
        self.replay_buffer = buffer


def _check_noise_shape(noise: ActionNoise | None, space: spaces.Space) -> None:
    """A noise whose shape does not broadcast to the Box's would fail at the first noisy action, with numpy's words."""
    if noise is None or not isinstance(space, spaces.Box):
        return
    try:
        fits = np.broadcast_shapes(noise.mean.shape, space.shape) == space.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"action_noise has shape {noise.mean.shape}, the action space {space.shape}: give mean and sigma "
                         f"shaped {space.shape} (one value per action dimension), or one number each")


@functools.cache
def _field_names(config_class: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(config_class))


def _shape_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Give each loaded state tensor its parameter's shape (Adam's moments) or none (``step``).

    Torch's ``load_state_dict`` moves the state to its parameter's device and dtype but keeps the shapes it is given,
    and files written before herl kept 0-d arrays hold a scalar parameter's moments and every step count shaped
    ``(1,)``. The CPU's fused Adam accepts that; CUDA's refuses moments whose shape differs from the parameter's.
    """
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param)
            for key, value in (state or {}).items():
                if not torch.is_tensor(value):
                    continue
                shape = () if key == "step" else param.shape
                if value.shape != shape and value.numel() == math.prod(shape):
                    state[key] = value.reshape(shape).clone()


def _initial_rate(owner: str, schedule: Callable[[float], float]) -> float:
    """A learning-rate schedule's value at the start of training, the rate the optimizers are built with (as SB3)."""
    try:
        rate = schedule(1.0)
    except Exception as err:
        raise ConfigError(owner, "learning_rate", schedule, "a number, or a function of the progress remaining "
                          f"(1 -> 0) returning one; calling it with 1.0 raised {type(err).__name__}: {err}") from err
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not math.isfinite(rate) or rate <= 0:
        raise ConfigError(owner, "learning_rate", schedule, f"a schedule returning a finite number > 0; it returned "
                          f"{rate!r} for the progress remaining 1.0")
    return float(rate)


class _ConstantSchedule:
    """A learning rate that does not change (SB3's ``constant_fn``)."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, progress_remaining: float) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"constant learning rate {self.value}"


def _resolve_extractor(policy: str, config: PolicyConfig, observation_space: spaces.Space,
                       keys: tuple[str, ...]) -> PolicyConfig:
    """``config`` with its features extractor picked where it says ``"auto"``, as SB3 picks: NatureCNN for
    ``CnnPolicy``; CombinedExtractor for ``MultiInputPolicy`` when a Dict entry the networks read is an image; else
    herl's flat inputs, unless ``features_extractor_kwargs`` are given, which take SB3's class for the policy."""
    if config.features_extractor != AUTO_EXTRACTOR:
        if policy == "CnnPolicy" and config.features_extractor is None:
            raise ValueError("CnnPolicy with policy_kwargs features_extractor_class=None: CnnPolicy reads images with "
                             "a features extractor; use MlpPolicy for flat inputs")
        return config
    images = isinstance(observation_space, spaces.Dict) and has_images(observation_space, keys)
    if policy == "CnnPolicy":
        name = "NatureCNN"
    elif policy == "MultiInputPolicy" and (images or config.features_extractor_kwargs):
        name = "CombinedExtractor" if isinstance(observation_space, spaces.Dict) else "FlattenExtractor"
    elif config.features_extractor_kwargs:
        name = "FlattenExtractor"
    else:
        name = None
    return dataclasses.replace(config, features_extractor=name)


def _accept_sde_off(hyperparameters: dict[str, Any]) -> None:
    """SB3's gSDE arguments: off (SB3's default, often passed) is accepted; on is refused with what to use."""
    use_sde = hyperparameters.pop("use_sde", False)
    for name in ("sde_sample_freq", "use_sde_at_warmup"):  # SB3 reads them only with use_sde=True
        hyperparameters.pop(name, None)
    if use_sde:
        raise ValueError(SDE_REFUSAL)


def _check_buffer_arguments(buffer_class: type, kwargs: Mapping[str, Any]) -> None:
    """A ``TypeError`` naming each ``replay_buffer_kwargs`` entry the buffer's constructor does not take, with the
    closest name it does (Python's own error names only the first, with no hint)."""
    try:
        parameters = inspect.signature(buffer_class).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return
    known = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise TypeError(f"replay_buffer_kwargs has {', '.join(map(repr, unknown))}, which {buffer_class.__name__} does "
                        f"not take{did_you_mean(unknown, known)}; it takes: {', '.join(known)}")


def _accept_sb3_arguments(owner: str, hyperparameters: dict[str, Any],
                          replay_buffer_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Take SB3's constructor arguments that are not herl hyperparameters out of ``hyperparameters`` (scripts and
    rl-zoo pass them at their defaults); returns the replay buffer's kwargs with what belongs to the buffer.

    ``optimize_memory_usage`` is the buffer's (herl's buffers store each state once with it, HER included), so it
    goes there as SB3 passes it; ``_init_setup_model=False`` (build the networks later, in ``_setup_model``) is
    refused: herl builds them in the constructor.
    """
    _accept_sde_off(hyperparameters)
    if hyperparameters.pop("_init_setup_model", True) is not True:
        raise ValueError(f"{owner} builds its networks in the constructor: _init_setup_model=False (SB3's way to build "
                         "them later, in _setup_model()) is not supported; leave it True or out")
    buffer_kwargs = dict(replay_buffer_kwargs or {})
    if "optimize_memory_usage" in hyperparameters:
        value = hyperparameters.pop("optimize_memory_usage")
        check(owner, "optimize_memory_usage", value, BOOL)
        if buffer_kwargs.get("optimize_memory_usage", value) != value:
            raise ValueError(f"{owner} got optimize_memory_usage={value} and replay_buffer_kwargs with "
                             f"optimize_memory_usage={buffer_kwargs['optimize_memory_usage']}: give it once")
        if value:  # False is the buffers' default: the kwargs (saved with the model) stay as the user gave them
            buffer_kwargs["optimize_memory_usage"] = True
    return buffer_kwargs


class Policy(nn.ModuleDict):
    """``model.policy``: every network of a model in one module, named as SB3 names them.

    ``policy.actor``, ``policy.critic``, ``policy.critic_target``, ``policy.actor_target`` (DDPG, TD3, SAC),
    ``policy.q_net``, ``policy.q_net_target`` (DQN) and ``policy.encoder`` (the observation normalizer), with
    ``state_dict()``, ``parameters()``, ``predict(...)``, ``set_training_mode(mode)``, ``device``, and SB3's
    ``policy.save(path)`` / ``Policy.load(path)``. The same object is ``model.nets``, from which algorithm files read
    their networks.

    A policy file is the model's file: a herl model file holds only the networks, the optimizers' states and the
    settings (no replay buffer), so it is small, and one format serves both. ``Policy.load`` returns the loaded
    model's policy, which predicts without an env; ``DQN.load`` (etc.) reads the same file as a whole model.
    """

    def __init__(self, model: OffPolicyAlgorithm, modules: Mapping[str, nn.Module]) -> None:
        super().__init__(modules)
        self._model = model  # a plain attribute (not a submodule): state_dict() holds networks only

    def _bind_acting_networks(self) -> None:
        """Give the network the model acts with (``actor``, DQN's ``q_net``) SB3's ``predict``."""
        for name in ("actor", "q_net"):
            if name in self and isinstance(self[name], ActingNetwork):
                self[name].bind_model(self._model, name)

    @property
    def device(self) -> torch.device:
        """The device the networks are on (the model's)."""
        return self._model.device

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The model's optimizer (SB3's ``policy.optimizer``): one over every network that trains (herl's Adam, or
        the class ``policy_kwargs`` name)."""
        return self._model.optimizers["optimizer"]

    @optimizer.setter
    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Train with another torch optimizer from the next update on (SB3 code assigns one). It steps after each
        backward pass in place of the model's own; parameters it does not hold stop learning. Files keep the model's
        own optimizer only (an assigned one is code): ``save`` warns, and a loaded model trains with its own, anew."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"policy.optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}: build "
                            "it over model.policy.parameters(), e.g. torch.optim.Adam(model.policy.parameters())")
        model = self._model
        model.optimizers["optimizer"] = optimizer
        model._assigned_optimizers["optimizer"] = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"

    @property
    def observation_space(self) -> spaces.Space:
        return self._model.observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self._model.action_space

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """The model's :meth:`~OffPolicyAlgorithm.predict`, except that DQN's policy acts greedily, as SB3's does: its
        epsilon-greedy exploration belongs to ``model.predict(obs, deterministic=False)`` only."""
        if "q_net" in self:
            deterministic = True
        return self._model.predict(observation, state, episode_start, deterministic)

    def save(self, path: str | os.PathLike | IO[bytes]) -> None:
        """Write the policy to ``path`` (SB3's ``policy.save``): the model's file, which :meth:`load` reads."""
        self._model.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike | IO[bytes], device: torch.device | str = "auto") -> Policy:
        """The policy of the model saved at ``path`` (by ``policy.save`` or ``model.save``), on ``device``; it
        predicts without an env (SB3's ``SACPolicy.load(path)``). Its ``_model`` is the whole loaded model."""
        return OffPolicyAlgorithm.load(path, device=device).policy

    def set_training_mode(self, mode: bool) -> None:
        """SB3's name for ``train(mode)``."""
        self.train(mode)


ActingNetwork.model_loader = OffPolicyAlgorithm.load

ALGORITHMS_BY_NAME: dict[str, type[OffPolicyAlgorithm]] = {}
"""herl's algorithms by the name a model file gives them, filled by :mod:`herl.algorithms` (the floor above this one):
``OffPolicyAlgorithm.load`` resolves a file's algorithm here."""


def model_classes() -> Any:
    """What the names in a model file stand for (:class:`herl.io.model.ModelClasses`: the file layer imports no class
    above it)."""
    from herl.io.model import ModelClasses
    from herl.training.noise import noise_from_json

    return ModelClasses(
        algorithms=ALGORITHMS_BY_NAME,
        buffers={c.__name__: c for c in (HerReplayBuffer, NStepReplayBuffer, ReplayBuffer)},
        action_noise=noise_from_json,
        policy_config=lambda algo, kwargs: PolicyConfig.from_kwargs(kwargs, algo.default_net_arch,
                                                                    algo.default_n_critics, algo.policy_options))


def _check_finite_observation(array: np.ndarray | torch.Tensor, name: str, batched: bool) -> None:
    """A NonFiniteError (a ValueError) naming the index of the first NaN or infinity in ``array`` (shaped (batch, ...);
    ``batched`` False: a single observation given to predict, whose batch axis was added)."""
    if torch.is_tensor(array):
        if not array.is_floating_point() or bool(torch.isfinite(array).all()):
            return
        first = torch.nonzero(~torch.isfinite(array))[0].tolist()
        value = float(array[tuple(first)])
    else:
        if array.dtype.kind not in "fc" or math.isfinite(np.add.reduce(array, None)) or np.isfinite(array).all():
            return
        first = np.argwhere(~np.isfinite(array))[0].tolist()
        value = array[tuple(first)]
    where = f"row {first[0]} of the batch, index {tuple(first[1:])}" if batched else f"index {tuple(first[1:])}"
    raise NonFiniteError(f"{name} holds {value} at {where}: predict refuses NaN and infinity (the policy would answer "
                         "a NaN action, or DQN's action 0, without a word). Find where the observation comes from (the "
                         "env's reset or step, or the code that builds it)")


def _add_batch_axis(observation: Any) -> Any:
    if isinstance(observation, Mapping):
        return {k: np.asarray(v)[None] for k, v in observation.items()}
    return np.asarray(observation)[None]
