"""Hindsight Experience Replay (Andrychowicz et al. 2017, arXiv:1707.01495) on the episode storage.

Online (default): transitions are stored once; at sampling time a fraction k/(k+1) of the batch
gets a new desired goal, an achieved goal of the same episode chosen by the strategy (or, for a
``desired_goal_share`` of them, the desired goal of another stored transition), and its reward (and
termination, for envs that end on success) is recomputed for that goal. Offline
(``online_sampling=False``, as Stable-Baselines 2 and cpprb do it): when an episode ends, each of
its transitions is stored once as it happened and k more times with relabeled goals, and sampling
is plain uniform replay over those copies.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from herl.buffers.goal_functions import (
    InfoBatch,
    bind_goal_function,
    env_goal_function,
    goal_function_values,
    is_remote_goal_env,
    probe_vectorized,
)
from herl.buffers.replay import ReplayBuffer, _file_errors, own_settings
from herl.buffers.samples import DictReplayBufferSamples
from herl.buffers.storage import EpisodeStorage, FieldSpec, GatheredRows, to_numpy
from herl.buffers.strategies import (
    GoalSelectionStrategy,
    RelabelMix,
    parse_strategy,
    relabel_count,
    sample_goal_offsets,
)
from herl.envs.goal_info import numeric_info_keys
from herl.errors import BOOL, NON_NEGATIVE_INT, POSITIVE_INT, NonFiniteError, Rule, as_integer, check, integer, number, one_of
from herl.utils import is_herls

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
DEFAULT_MAX_EPISODE_LENGTH = 10_000
INFO_PREFIX = "info/"
DEFAULT_DEMO_BATCH_RATIO = 0.125
"""Nair et al. 2018 (arXiv:1709.10089) drew 128 of each 1024 transitions from the demonstrations."""
N_SAMPLED_GOAL = integer(0, note="0 turns relabeling off")
DEMO_BATCH_RATIO = number(0.0, 1.0, high_open=True, note="the fraction of each batch drawn from the demonstrations")
GOAL_MOVED = 1e-3
"""An episode "moved its achieved goal" when it ended more than this (in any coordinate) from where it started."""
DESIRED_GOAL_SHARE = number(0.0, 1.0, note="the share of relabeled transitions given the desired goal of another stored "
                                           "transition")
REMOVED_OPTIONS = ("episode_priority", "goal_motion_scale", "goal_motion_weight", "goal_lift_weight", "motion_bonus",
                   "motion_bonus_scale")
"""Options of FetchPush and FetchPickAndPlace experiments that no preset adopted, removed since (what they found is in
docs/research/fetch.md): episodes drawn by how far (``goal_motion``) or how high (``goal_lift_weight``) their achieved
goal moved, and a reward bonus for moving it. Files written before still load; :func:`drop_removed_options` says that
these are ignored."""


def drop_removed_options(settings: Mapping[str, Any], source: str, prefix: str = "") -> dict[str, Any]:
    """``settings`` without the :data:`REMOVED_OPTIONS` (named ``prefix + option``), with a note (a UserWarning) naming
    those that ``source`` holds and whether ignoring them changes what is trained."""
    removed = {key: value for key, value in settings.items()
               if key.startswith(prefix) and key[len(prefix):] in REMOVED_OPTIONS}
    if not removed:
        return dict(settings)
    named = ", ".join(f"{key}={value!r}" for key, value in removed.items())
    # without an episode priority the goal_motion weights did nothing, nor the bonus's scale without a bonus
    was_on = (settings.get(f"{prefix}episode_priority") not in (None, "none")
              or bool(settings.get(f"{prefix}motion_bonus")))
    effect = ("; they were on, so from here it trains as a run without them: episodes drawn uniformly, the env's own "
              "rewards" if was_on else ": they were off, so nothing changes")
    warnings.warn(f"{source} names {named}: options herl no longer has (experiments no preset adopted; what they found "
                  f"is in docs/research/fetch.md). They are ignored{effect}", UserWarning, stacklevel=3)
    return {key: value for key, value in settings.items() if key not in removed}


SB3_HOOKS = ("_sample_goals", "_get_virtual_samples", "_get_real_samples", "_get_samples")
"""Stable-Baselines3's HerReplayBuffer internals, which herl's never calls."""


def _refuse_sb3_hooks(cls: type) -> None:
    """A subclass written for SB3's HerReplayBuffer overrides methods herl never calls: it would train as if they
    were not there (or, for ``_sample_goals``, be called with other arguments). Say what to override instead."""
    overridden = sorted({name for klass in cls.__mro__ if not is_herls(klass) for name in SB3_HOOKS
                         if name in vars(klass)})
    if overridden:
        raise TypeError(
            f"{cls.__name__} overrides {', '.join(overridden)}, Stable-Baselines3's HerReplayBuffer internals, which "
            "herl's HerReplayBuffer never calls: override goal_steps(steps, lengths) for a goal selection strategy "
            "of your own, or sample(batch_size, env) for the whole batch (docs/buffers.md)")


def _warn_if_next_step_autoreset(env: Any) -> None:
    """A gymnasium vector env in NEXT_STEP autoreset mode (its default): the step after an episode's end returns the
    reset observation with no action taken, a transition that must not be stored. The buffer cannot tell it from a
    real one, so it says so once, where the env is given."""
    from gymnasium.vector import AutoresetMode, VectorEnv

    if not isinstance(env, VectorEnv):
        return
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode in (AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP.value):
        from herl.envs.checks import GoalEnvWarning

        warnings.warn(
            "this vector env autoresets in NEXT_STEP mode (gymnasium's default): the step after an episode's end "
            "returns the next episode's reset observation with no action taken, and HER would relabel across "
            "that step if it were added. Create the env with autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP "
            "(and store infos['final_obs'][i] as the next_obs of an env whose episode ended), or skip that step "
            "for each env whose previous step ended its episode", GoalEnvWarning, stacklevel=3)


def check_goal_space(observation_space: spaces.Space) -> None:
    """A HER buffer needs Dict observations with the three goal-env keys and matching goal shapes."""
    if not isinstance(observation_space, spaces.Dict):
        raise ValueError(
            f"HerReplayBuffer needs a Dict observation space with keys {list(GOAL_KEYS)}, got "
            f"{type(observation_space).__name__}: use a goal env (gymnasium-robotics GoalEnv style) or "
            "herl.ReplayBuffer for plain replay"
        )
    missing = [k for k in GOAL_KEYS if k not in observation_space.spaces]
    if missing:
        raise ValueError(
            f"the observation space lacks the key(s) {missing}: a goal env's observations are dicts with "
            f"{list(GOAL_KEYS)}"
        )
    achieved, desired = observation_space["achieved_goal"], observation_space["desired_goal"]
    if achieved.shape != desired.shape:
        raise ValueError(
            f"achieved_goal has shape {achieved.shape} but desired_goal {desired.shape}: they must match, "
            "since an achieved goal becomes a desired goal when relabeling"
        )


class HerReplayBuffer(ReplayBuffer):
    """Replay buffer that relabels goals in hindsight, with Stable-Baselines3's constructor.

    The engine's parts, each from its own arguments: which goals a batch gets (:attr:`relabel_mix`, a
    :class:`~herl.buffers.strategies.RelabelMix` of ``n_sampled_goal``, ``goal_selection_strategy`` and
    ``desired_goal_share``), the goal functions that score them (``env``, ``compute_reward``, ``compute_terminated``,
    ``copy_info_dict``, ``info_keys``, ``reward_context``), when relabeling happens (``online_sampling``), and what
    :class:`ReplayBuffer` adds (storage layout and device, prioritized replay, n-step returns); demonstrations keep a
    store of their own.

    Args (beyond :class:`ReplayBuffer`'s):
        env: the goal env (gymnasium Env, gymnasium vector env or SB3 VecEnv) whose
            ``compute_reward`` and ``compute_terminated`` are used, unless given explicitly.
        n_sampled_goal: k, hindsight goals per real transition; a fraction k/(k+1) of each batch is
            relabeled. 0 is plain replay.
        goal_selection_strategy: "future", "final", "episode" or "random" (or the enum).
        desired_goal_share: the share of the relabeled transitions that get, instead of a goal chosen by the
            strategy, the desired goal of a transition drawn uniformly from the whole buffer: goals from the
            distribution the agent is evaluated on, set in states they were not set in (the "actual" goals of the
            "future + actual" relabeling of Pitis, Chan & Ba's ProtoGE, RLDM 2019; the mrl library's Fetch recipes
            relabel 40 % of each batch with future goals and 40 % with these: ``n_sampled_goal=4,
            desired_goal_share=0.5``). 0 (default): every relabeled goal comes from the strategy.
        copy_info_dict: store the numeric info entries and pass them to ``compute_reward`` as a dict
            of arrays (one row per relabeled transition). Without it ``info`` is an empty dict.
        compute_reward: vectorized ``(achieved_goal, desired_goal, info) -> rewards`` used instead
            of ``env.compute_reward``.
        compute_terminated: vectorized ``(achieved_goal, desired_goal, info) -> bools``; taken from
            the env when it has one. When neither exists, relabeled transitions keep the stored
            termination flag.
        online_sampling: False relabels at episode end and stores the k copies.
        max_episode_length: longest episode, for the episode staging area of offline relabeling
            (defaults to the env's time limit when known, else 10,000).
        info_keys: which info entries to store with ``copy_info_dict`` (default: every numeric one
            seen at the first ``add``).
        reward_context: stored fields added to the ``info`` that ``compute_reward`` receives, for
            rewards that depend on more than the goals (cpprb's ``reward_func(next_state, action,
            goal)``): any of "action", "observation" and "next_observation" (and "next_<key>" /
            "<key>" for other observation keys). Gathered at relabeling time, never stored twice.
        seed: seed of the buffer's generator.
        demonstrations: expert episodes to learn from (Nair et al. 2018, arXiv:1709.10089): a
            ``herl.demos.Demonstrations``, a dataset folder (``herl record``) or a local Minari id. They are
            kept in a store of their own, never overwritten by new transitions, and relabeled as the rest.
        demo_batch_ratio: the fraction of each sampled batch drawn from the demonstrations (rounded down
            to whole rows; the batch's ``demo_mask`` says which rows they are), in [0, 1).
        n_steps: n-step returns (see :class:`ReplayBuffer`), for online relabeling: the rewards of a transition's
            later steps are recomputed with ``compute_reward`` for its goal, relabeled or not (multi-step HER, as in
            Yang et al. 2021, arXiv:2102.12962, without their bias correction).
        gamma: the discount of the n-step sums (the algorithm's gamma).
        wrapped_env: SB3 < 1.6's name of ``env``, accepted as it.
        env_info: a name of older SB3 docs; only None is accepted (pass ``env=``).

    Sampling from an episode that is still running is allowed: its goals come from the part that is
    stored (all of them real achieved goals of that episode), so training can start before the first
    episode ends. ``random`` draws goals from complete episodes whenever there is one.
    """

    FILE_KIND = "her_replay_buffer"
    _splits_long_episodes = False  # relabeling needs whole episodes: a too-long one is an error

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        env: Any = None,
        device: torch.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        n_sampled_goal: int = 4,
        goal_selection_strategy: GoalSelectionStrategy | str = "future",
        copy_info_dict: bool = False,
        *,
        desired_goal_share: float = 0.0,
        compute_reward: Callable | None = None,
        compute_terminated: Callable | None = None,
        online_sampling: bool = True,
        max_episode_length: int | None = None,
        info_keys: list[str] | None = None,
        reward_context: tuple[str, ...] = (),
        seed: int | None = None,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        storage_device: torch.device | str | None = None,
        demonstrations: Any = None,
        demo_batch_ratio: float = DEFAULT_DEMO_BATCH_RATIO,
        wrapped_env: Any = None,
        env_info: Mapping[str, Any] | None = None,
        check_finite: bool = True,
        n_steps: int = 1,
        gamma: float = 0.99,
    ) -> None:
        env = _sb3_1x_arguments(buffer_size, env, wrapped_env, env_info)
        _refuse_sb3_hooks(type(self))
        owner = type(self).__name__  # herl's rules, not int(): int(nan) named no argument, int(None) a TypeError
        buffer_size = as_integer(owner, "buffer_size", buffer_size)
        n_envs = as_integer(owner, "n_envs", n_envs)
        n_sampled_goal = as_integer(owner, "n_sampled_goal", n_sampled_goal, N_SAMPLED_GOAL)
        if max_episode_length is not None:
            max_episode_length = as_integer(owner, "max_episode_length", max_episode_length)
        if n_steps != 1 and not online_sampling:
            raise ValueError("n-step returns follow each sampled transition through its stored episode, which offline "
                             "relabeling does not keep: use online_sampling=True with n_steps > 1")
        check(type(self).__name__, "demo_batch_ratio", demo_batch_ratio, DEMO_BATCH_RATIO)
        self.demo_batch_ratio = float(demo_batch_ratio)
        check_goal_space(observation_space)
        strategy = parse_strategy(goal_selection_strategy)
        check(type(self).__name__, "desired_goal_share", desired_goal_share, DESIRED_GOAL_SHARE)
        self.relabel_mix = RelabelMix(n_sampled_goal, strategy, float(desired_goal_share))
        if desired_goal_share and not online_sampling:
            raise ValueError("desired_goal_share draws the env's desired goals from the stored transitions, and offline "
                             "relabeling stores relabeled copies among them: use online_sampling=True with "
                             "desired_goal_share > 0")
        self.copy_info_dict = bool(copy_info_dict)
        self.online_sampling = bool(online_sampling)
        self.info_keys = list(info_keys) if info_keys is not None else None
        self.reward_context = tuple(reward_context)
        known = {"action"} | {f"{p}{k}" for k in observation_space.spaces for p in ("", "next_")}
        unknown = [name for name in self.reward_context if name not in known]
        if unknown:
            raise ValueError(f"unknown reward_context field(s) {unknown}: choose from {sorted(known)}")
        self.env = env
        _warn_if_next_step_autoreset(env)
        self.max_episode_length = max_episode_length or _time_limit(env) or DEFAULT_MAX_EPISODE_LENGTH
        known_length = None if max_episode_length else _time_limit(env)  # the env's own limit: episodes reach it
        if self.online_sampling and known_length:
            # say it now, not when the first episode outgrows its column (buffer_size=20 on a 50-step env)
            rows = max(int(buffer_size) // max(int(n_envs), 1), 1) - bool(optimize_memory_usage)
            if rows < known_length:
                need = (known_length + bool(optimize_memory_usage)) * int(n_envs)
                raise ValueError(
                    f"buffer_size={buffer_size} cannot hold one whole episode of {known_length} steps per env "
                    f"(n_envs={n_envs}): HER relabels within whole episodes, so give it a buffer_size of at least {need}"
                )
        self._user_compute_reward = compute_reward
        self._user_compute_terminated = compute_terminated
        self._info_specs: dict[str, FieldSpec] = {}
        self._goal_shape = tuple(observation_space["achieved_goal"].shape)  # () for a Discrete goal, stored as (1,)
        self._bind_goal_functions(env, compute_reward, compute_terminated)
        super().__init__(
            buffer_size, observation_space, action_space, device=device, n_envs=n_envs,
            optimize_memory_usage=optimize_memory_usage, handle_timeout_termination=handle_timeout_termination, seed=seed,
            prioritized=prioritized, alpha=alpha, beta=beta, priority_eps=priority_eps, storage_device=storage_device,
            check_finite=check_finite, n_steps=n_steps, gamma=gamma,
        )
        if not self.online_sampling:
            # Episodes wait in a staging area sized for one episode per env; at their end they are
            # relabeled into the main store, which is flat (each transition its own row).
            self.storage = self._make_storage(self.max_episode_length + 1, self.n_envs, share_states=False,
                                              size_argument="max_episode_length (the longest episode relabeled offline)")
            self.relabeled = self._make_storage(max(int(buffer_size), 1), 1, share_states=False)
            if self.prioritized:  # priorities belong to the store that is sampled
                self._attach_priorities(self.relabeled)
        self._stores_infos = self.copy_info_dict
        self._goal_moved: collections.deque[bool] = collections.deque(maxlen=100)
        self._on_episode_end = self._episodes_ended
        if self._compute_reward is not None:  # once, at the first episode's end (then the hook is as before)
            self._on_episode_end = self._check_first_episode
        self._probe_done = False
        self._warned_small_store = False
        self._termination_checks_left = 20  # episodes whose termination is still checked (see _check_termination)
        if not self.copy_info_dict:  # with info entries, probe once their shapes are known (first add)
            self._probe(at_construction=True)
        self.demo_storage: EpisodeStorage | None = None
        self._demo_masks: dict[int, torch.Tensor] = {}
        if demonstrations is not None:
            self._store_demonstrations(demonstrations)

    def _device_changed(self) -> None:
        self._demo_masks = {}

    # SB3's names for the relabeling mix
    @property
    def n_sampled_goal(self) -> int:
        return self.relabel_mix.n_sampled_goal

    @property
    def goal_selection_strategy(self) -> GoalSelectionStrategy:
        return self.relabel_mix.strategy

    @property
    def desired_goal_share(self) -> float:
        return self.relabel_mix.desired_goal_share

    @property
    def her_ratio(self) -> float:
        return self.relabel_mix.her_ratio

    # ------------------------------------------------------------------ goal functions
    def _bind_goal_functions(self, env: Any, compute_reward: Callable | None, compute_terminated: Callable | None) -> None:
        reward_fn = compute_reward or env_goal_function(env, "compute_reward")
        if reward_fn is None and self.n_sampled_goal > 0:
            given = ("" if env is None else
                     f" (the env given, {type(getattr(env, 'unwrapped', env)).__name__}, has no compute_reward method)")
            raise ValueError(
                f"HerReplayBuffer needs a reward function to relabel goals{given}: pass env= (a goal env with "
                "compute_reward) or compute_reward=fn(achieved_goal, desired_goal, info)"
            )
        terminated_fn = compute_terminated or env_goal_function(env, "compute_terminated")
        self._compute_reward = self._shaped(bind_goal_function(reward_fn)) if reward_fn is not None else None
        self._compute_terminated = self._shaped(bind_goal_function(terminated_fn)) if terminated_fn is not None else None

    def _shaped(self, call: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        """``call`` given goals shaped ``(batch, *goal space's shape)``, as the docs and checks promise, where the
        storage's shape differs: a Discrete goal (shape ()) is stored as (1,), and was passed as (batch, 1)."""
        if self._goal_shape == ():
            return lambda achieved, desired, info: call(achieved.reshape(len(achieved)), desired.reshape(len(desired)),
                                                        info)
        return call

    def _probe(self, *, at_construction: bool = False) -> None:
        """Check once that the goal functions are vectorized (SB3 users hit an opaque shape error).

        An env's functions may need the env to have been reset (SB3's bit flipping env with image
        observations does), and SB3 first calls them when sampling: at construction, a call that fails
        on an env's function, or any call into a SubprocVecEnv's worker (which dies when it raises),
        waits for the first use instead (the first episode's end or the first sample).
        """
        if self._probe_done or self._compute_reward is None:
            return
        from_env = self.env is not None and (self._user_compute_reward is None or self._user_compute_terminated is None)
        if at_construction and from_env and is_remote_goal_env(self.env):
            return
        goal = self.observation_space["achieved_goal"]
        info = self._probe_info()
        functions = [(self._compute_reward, "compute_reward", self._user_compute_reward is None)]
        if self._compute_terminated is not None:
            functions.append((self._compute_terminated, "compute_terminated", self._user_compute_terminated is None))
        for function, what, env_own in functions:
            try:
                probe_vectorized(function, goal.shape, goal.dtype, info, what=what)
            except ValueError as err:
                # an env's function whose call failed: retry at first use; a function the user gave is said now
                if at_construction and env_own and self.env is not None and err.__cause__ is not None:
                    return
                raise
        self._probe_done = True

    def _probe_info(self) -> InfoBatch:
        fields = self.storage.transition_fields
        info = {k[len(INFO_PREFIX):]: np.zeros((2, *s.shape), s.dtype) for k, s in fields.items() if k.startswith(INFO_PREFIX)}
        for name in self.reward_context:
            spec = fields["action"] if name == "action" else self.storage.state_fields[name.removeprefix("next_")]
            info[name] = np.zeros((2, *spec.shape), spec.dtype)
        return InfoBatch(info, 2)

    def set_env(self, env: Any) -> None:
        """Use ``env``'s goal functions from now on (explicit compute_reward/compute_terminated still win)."""
        self.env = env
        _warn_if_next_step_autoreset(env)
        self._bind_goal_functions(env, self._user_compute_reward, self._user_compute_terminated)
        self._probe_done = False
        self._probe(at_construction=True)

    # ------------------------------------------------------------------ info entries
    def _transition_specs(self) -> dict[str, FieldSpec]:
        return {**super()._transition_specs(), **self._info_specs}

    def _declare_info_field(self, name: str, spec: FieldSpec) -> None:
        self._info_specs[name] = spec
        for storage in self._storages().values():
            storage.add_transition_field(name, spec)

    def _add_info_fields(self, transitions: dict[str, np.ndarray], infos: Any) -> None:
        if not self._info_specs:  # first add: the info entries' shapes and dtypes become known
            if self.info_keys is None:
                self.info_keys = numeric_info_keys(infos)
            for key in self.info_keys:
                values = _info_values(infos, key, self.n_envs)
                self._declare_info_field(INFO_PREFIX + key, FieldSpec(values.shape[1:], values.dtype))
            self._probe()
        for key in self.info_keys:
            transitions[INFO_PREFIX + key] = _info_values(infos, key, self.n_envs)

    # ------------------------------------------------------------------ episodes
    def _episodes_ended(self, envs: np.ndarray | None = None) -> None:
        """After episodes ended: note whether each moved its achieved goal (:attr:`goal_moved_share`), then relabel
        them (offline). Without ``envs``: after an add, every env had an episode open during it, so those with none
        open now just ended."""
        storage = self.storage
        for env_idx in np.flatnonzero(storage.open_start < 0) if envs is None else envs:
            env_idx = int(env_idx)
            last = (storage.pos[env_idx] - 1) % storage.rows
            start, length = int(storage.ep_start[last, env_idx]), int(storage.ep_len[last, env_idx])
            if not length:
                continue
            # the episode's first state and the state its last transition led to: two row reads, on the add path
            final = (start + length - 1) % storage.rows
            final_next = (final + 1) % storage.rows if storage.share_states else final
            reached = storage.next_states["achieved_goal"][final_next, env_idx]
            change = to_numpy(reached).astype(np.float64) - to_numpy(storage.states["achieved_goal"][start, env_idx])
            self._goal_moved.append(bool(np.abs(change).max() > GOAL_MOVED))
            if self._termination_checks_left > 0:
                self._check_termination(storage.flat_index(np.array([final]), np.array([env_idx])))
            if not self.online_sampling:
                self._relabel_episode(env_idx)

    def _check_termination(self, flat: np.ndarray) -> None:
        """Warn once if an ended episode's last step says the termination HER recomputes for relabeled goals is
        wrong: a step that terminated where no ``compute_terminated`` exists (relabeled transitions keep the stored
        flag, so a goal reached under relabeling bootstraps on), or a ``compute_terminated`` that disagrees with the
        step's own flag for the real goal. A stored flag is read at every episode's end until a warning; a
        ``compute_terminated`` is called on the first 20 episodes only."""
        from herl.envs.checks import GoalEnvWarning

        rows = GatheredRows(self.storage, flat)
        terminated = bool(to_numpy(rows.transition("terminated"))[0])
        if self._compute_terminated is None:
            if terminated and self.n_sampled_goal > 0:
                self._termination_checks_left = 0
                warnings.warn(
                    "an episode ended with terminated=True, and there is no compute_terminated: if the env ends its "
                    "episodes on success, relabeled transitions that reach their new goal are not terminal (they keep "
                    "the stored flag), so the critic bootstraps past them. Give the env a vectorized "
                    "compute_terminated(achieved_goal, desired_goal, info), or pass one in replay_buffer_kwargs "
                    "(compute_terminated=...); if it ends episodes for other reasons (a failure), this is expected",
                    GoalEnvWarning, stacklevel=5)
            return
        self._termination_checks_left -= 1
        achieved, desired = to_numpy(rows.next_state("achieved_goal")), to_numpy(rows.state("desired_goal"))
        recomputed = goal_function_values(self._compute_terminated(achieved, desired, self._reward_info(rows, slice(None))),
                                          1, "compute_terminated")
        if bool(recomputed[0]) != terminated:
            self._termination_checks_left = 0
            warnings.warn(
                f"compute_terminated disagrees with step on an episode's last step: step returned terminated="
                f"{terminated} but compute_terminated(achieved_goal, desired_goal, info) returns {bool(recomputed[0])}. "
                "HER recomputes the termination of relabeled transitions with it, so both must tell the same (a "
                "step that ends on success returns compute_terminated's value)", GoalEnvWarning, stacklevel=5)

    @property
    def goal_moved_share(self) -> float | None:
        """Share of the last 100 episodes stored whose achieved goal ended more than 1e-3 (in any coordinate) from
        where it started (for FetchPush: episodes that moved the block); None before the first episode ends. Kept
        since the buffer was built or loaded (a buffer file does not hold it; a ``herl train`` checkpoint does, see
        :attr:`goal_moved_history`)."""
        return float(np.mean(self._goal_moved)) if self._goal_moved else None

    @property
    def goal_moved_history(self) -> list[bool]:
        """The window behind :attr:`goal_moved_share`: for each of the last 100 episodes, oldest first, whether it
        moved its achieved goal. ``herl train``'s checkpoints save it and set it back, so that a resumed run logs the
        ``diagnostics/goal_moved_episodes`` of a run never stopped (it started empty after a resume)."""
        return list(self._goal_moved)

    @goal_moved_history.setter
    def goal_moved_history(self, history: Any) -> None:
        if not isinstance(history, (list, tuple)) or not all(type(moved) is bool for moved in history):
            raise ValueError(f"goal_moved_history must be a list of bools (one per episode), got {history!r:.80}")
        self._goal_moved = collections.deque(history, maxlen=self._goal_moved.maxlen)

    def add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any = None, infos: Any = None, *,
            terminated: Any = None, truncated: Any = None) -> None:
        """Store one transition per environment (see :meth:`ReplayBuffer.add`).

        In SB3's form (``done`` with a list of ``infos``), the ``next_obs`` of an env whose episode ended must be its
        final observation, which an SB3 VecEnv hands in ``infos[i]["terminal_observation"]`` while its ``step``
        returns the next episode's reset observation in its place (SB3's algorithms swap them before calling
        ``add``). Fed a VecEnv's raw output, this buffer takes the final observation from the infos: HER relabels
        from the episode's last achieved goal, and a reset observation there would teach goals the episode never
        reached. (Not through an SB3 ``VecNormalize``, whose terminal observations are normalized: there the
        caller decides which form it stores.)
        """
        if done is not None and infos is not None and not isinstance(infos, Mapping):
            next_obs = self._final_observations(next_obs, done, infos)
        super().add(obs, next_obs, action, reward, done, infos, terminated=terminated, truncated=truncated)

    def _final_observations(self, next_obs: Any, done: Any, infos: Any) -> Any:
        """``next_obs`` with, for each env that ended, ``infos[i]["terminal_observation"]`` where it differs."""
        ended = np.flatnonzero(self._flags(done, "done"))
        if not len(ended) or len(infos) != self.n_envs or _vec_normalize(self.env) is not None:
            return next_obs
        finals = {int(i): infos[i].get("terminal_observation") for i in ended if isinstance(infos[i], Mapping)}
        finals = {i: final for i, final in finals.items() if isinstance(final, Mapping)}
        if not finals:
            return next_obs
        arrays = self._obs(next_obs, "next_obs")
        replaced: dict[str, Any] | None = None
        for i, final in finals.items():
            keys = [k for k in self._obs_shapes if k in final]
            if all(np.array_equal(to_numpy(arrays[k][i]), np.asarray(final[k]).reshape(self._obs_shapes[k][1:]))
                   for k in keys):
                continue
            if replaced is None:  # a copy: the caller's arrays stay as they were
                replaced = {k: (v.clone() if torch.is_tensor(v) else np.array(v, copy=True)) for k, v in arrays.items()}
            for k in keys:
                value = np.asarray(final[k]).reshape(self._obs_shapes[k][1:])
                replaced[k][i] = torch.as_tensor(value) if torch.is_tensor(replaced[k]) else value
        return arrays if replaced is None else replaced

    def _after_truncation(self, envs: np.ndarray) -> None:
        self._episodes_ended(envs)

    @property
    def ep_length(self) -> np.ndarray:
        """SB3's ``ep_length``: per row, the length of the ended episode it belongs to (0 while its episode runs)."""
        return self.storage.ep_len.copy()

    @property
    def _current_ep_start(self) -> np.ndarray:
        """SB3's ``_current_ep_start``: per env, the row its running episode started at (``pos`` when none runs)."""
        storage = self.storage
        return np.where(storage.open_len > 0, storage.open_start, storage.pos)

    def _last_episode(self, env_idx: int) -> np.ndarray:
        """Flat indices of the transitions of the episode ``env_idx`` just ended, in order."""
        stage = self.storage
        last = (stage.pos[env_idx] - 1) % stage.rows
        start, length = int(stage.ep_start[last, env_idx]), int(stage.ep_len[last, env_idx])
        return stage.flat_index(np.arange(start, start + length), np.full(length, env_idx))

    def _check_first_episode(self) -> None:
        """Warn if ``compute_reward``, given the first ended episode's goals, disagrees with the rewards its steps gave.

        Relabeling recomputes rewards with it, so a mismatch trains on wrong rewards without an error (SB3's docs'
        own custom env returns 0/-1 from step and 1/0 from compute_reward). This is the cheap part of
        ``herl check-env``, on data the buffer already holds: no env is stepped.
        """
        self._on_episode_end = self._episodes_ended
        self._probe()
        flat = self._last_episode(int(np.flatnonzero(self.storage.open_start < 0)[0]))
        rows = GatheredRows(self.storage, flat)
        achieved, desired = to_numpy(rows.next_state("achieved_goal")), to_numpy(rows.state("desired_goal"))
        recomputed = goal_function_values(self._compute_reward(achieved, desired, self._reward_info(rows, slice(None))),
                                          len(flat), "compute_reward")
        stored = to_numpy(rows.transition("reward"))
        wrong = np.flatnonzero(~np.isclose(recomputed, stored, atol=1e-5))
        goals, next_goals = to_numpy(rows.state("desired_goal")), to_numpy(rows.next_state("desired_goal"))
        goal_jumps = np.flatnonzero(~np.all(np.isclose(goals, next_goals), axis=tuple(range(1, goals.ndim))))
        last = len(flat) - 1
        # A goal env keeps its desired goal through an episode and a reset draws a new one: a desired goal that
        # changes at the episode's last step only, or a reward that disagrees there only, says the next_obs stored
        # for that step is the next episode's reset observation, not the env's reward function
        looks_reset = len(flat) > 1 and (list(goal_jumps) == [last] or list(wrong) == [last])
        if looks_reset and (len(wrong) or len(goal_jumps)):
            from herl.envs.checks import GoalEnvWarning

            warnings.warn(
                f"the first episode stored ({len(flat)} steps) ends on a next_obs that looks like the next episode's "
                "reset observation" + (f" (step returned reward {float(stored[last])!r} for that step, but its "
                                       f"achieved goal gives {float(recomputed[last])!r})" if len(wrong) else
                                       " (its desired goal changed at that step only)") +
                ": the data passed to add() is wrong, not the env's compute_reward. The next_obs of a step that ends "
                "an episode must be its final observation: infos[i]['terminal_observation'] of an SB3 VecEnv (this "
                "buffer takes it from there when add(..., done, infos) gets the infos), infos['final_obs'][i] of a "
                "gymnasium vector env in SAME_STEP autoreset mode, or a single env's own step result, never the "
                "observation reset() returns. HER relabels from that last achieved goal", GoalEnvWarning, stacklevel=4)
        elif len(wrong):
            from herl.envs.checks import GoalEnvWarning, reward_mismatch_message

            t = int(wrong[0])
            where = f"on the first episode stored (at its step {t}; {len(wrong)} of its {len(flat)} steps disagree)"
            hint = "" if self.copy_info_dict else "; if the reward needs info entries, pass copy_info_dict=True"
            warnings.warn(reward_mismatch_message(where, float(stored[t]), float(recomputed[t])) + hint +
                          ". HER relabels with compute_reward, so it would train on rewards the env never gives "
                          "(`herl check-env` runs the full check)", GoalEnvWarning, stacklevel=4)
        if self._on_episode_end is not None:
            self._on_episode_end()

    def _relabel_episode(self, env_idx: int) -> None:
        """Offline HER: store the episode ``env_idx`` just ended once as it happened and k times relabeled."""
        stage = self.storage
        flat = self._last_episode(env_idx)
        length = len(flat)
        if self.n_sampled_goal * length >= self.relabeled.rows and not self._warned_small_store:
            self._warned_small_store = True
            warnings.warn(
                f"an episode of {length} steps makes {self.n_sampled_goal * length} relabeled copies, which fill "
                f"buffer_size={self.relabeled.rows}: they overwrite the episode's real transitions at once, so the "
                f"buffer keeps none. Raise buffer_size to at least {(self.n_sampled_goal + 1) * length}",
                stacklevel=5)
        # The episode is stored once as it happened, then k relabeled copies of it. The reward function runs in
        # between and may raise: the store and the generator must then be as they were (cpprb's
        # on_episode_end keeps the episode staged for a retry, which must not store it twice). So the copies are made
        # first, except for `random`, which draws goals from the store with this episode in it: that one episode is
        # stored first and taken back if relabeling fails.
        real = GatheredRows(stage, flat).fields()
        if not self.n_sampled_goal:
            self.relabeled.extend(*real)
            return
        copies = np.concatenate([flat] * self.n_sampled_goal)
        rows = GatheredRows(stage, copies)
        from_store = self.goal_selection_strategy is GoalSelectionStrategy.RANDOM
        rng_state = self.rng.bit_generator.state
        with self.relabeled.undo_extend_on_error(length) if from_store else contextlib.nullcontext():
            try:
                if from_store:
                    self.relabeled.extend(*real)
                self._relabel(stage, copies, slice(None), rows)
            except BaseException:
                self.rng.bit_generator.state = rng_state
                raise
        if not from_store:
            self.relabeled.extend(*real)
        self.relabeled.extend(*rows.fields())

    # ------------------------------------------------------------------ demonstrations
    def _demo_store(self, rows: int) -> EpisodeStorage:
        """The store of the demonstrations: one column, the main store's layout, sized to hold them all."""
        refused = [("online_sampling=False", not self.online_sampling, "the demo store is relabeled at sampling time"),
                   ("prioritized=True", self.prioritized, "demo rows are drawn uniformly"),
                   ("copy_info_dict=True", self.copy_info_dict, "demonstrations carry no info entries to relabel with")]
        for name, on, why in refused:
            if on:
                raise ValueError(f"demonstrations cannot be combined with {name} yet ({why}): leave it out")
        return self._make_storage(max(rows, 2), 1, share_states=self.optimize_memory_usage)

    def _store_demonstrations(self, demonstrations: Any) -> None:
        from herl.demos.dataset import DatasetError, as_demonstrations, policy_scale

        demos = as_demonstrations(demonstrations)
        demos.check_spaces(self.observation_space, self.action_space)  # names the differing key and both shapes
        if len(demos) == 0 or demos.n_episodes == 0:
            raise DatasetError("the demonstrations hold no steps: record some first (herl record, or "
                               "generate_expert_traj)")
        states = {k: np.asarray(demos.observations[k]) for k in self._state_specs}
        next_states = {k: np.asarray(demos.next_observations[k]) for k in self._state_specs}
        transitions = {"action": policy_scale(demos.actions, self.action_space), "reward": demos.rewards,
                       "terminated": demos.terminations, "truncated": demos.truncations}
        for what, fields in (("observation", states), ("next observation", next_states), ("step's", transitions)):
            for key, values in fields.items():
                if values.dtype.kind == "f" and not np.isfinite(values).all():
                    row = int(np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))[0])
                    raise NonFiniteError(f"the demonstrations' {what} {key!r} holds NaN or infinity (at step {row}): "
                                         "record them again")
        self.demo_storage = self._demo_store(len(demos) + self.optimize_memory_usage * demos.n_episodes)
        self.demo_storage.fill_episodes(states, next_states, transitions, demos.episode_starts)

    @property
    def n_demo_transitions(self) -> int:
        """Transitions in the demonstration store (``len(buffer)`` counts the main store's only)."""
        return 0 if self.demo_storage is None else self.demo_storage.n_transitions

    def demo_rows(self, batch_size: int) -> int:
        """Rows of a batch of ``batch_size`` drawn from the demonstrations: ``demo_batch_ratio`` of it, rounded down
        (so at least one row comes from the main store)."""
        if self.demo_storage is None:
            return 0
        return math.floor(batch_size * self.demo_batch_ratio + 1e-9)

    def _demo_mask(self, batch_size: int) -> torch.Tensor:
        """Which rows of a batch are demonstrations: the last ``demo_rows``, made once per batch size."""
        mask = self._demo_masks.get(batch_size)
        if mask is None:
            mask = torch.zeros(batch_size, dtype=torch.bool)
            mask[batch_size - self.demo_rows(batch_size):] = True
            mask = self._demo_masks[batch_size] = mask.to(self.device)
        return mask

    # ------------------------------------------------------------------ sampling
    def _sample_arrays(self, batch_size: int):
        if not self.online_sampling and self.relabeled.n_transitions > 0:
            flat = self.relabeled.sample_flat(batch_size, self.rng)
            return GatheredRows(self.relabeled, flat), self.relabeled, flat
        n_demo = self.demo_rows(batch_size) if self.demo_storage is not None else 0
        storage = self.storage
        flat = storage.sample_flat(batch_size - n_demo, self.rng)
        batch = self._relabeled_rows(storage, flat)
        if n_demo:  # the demonstrations' rows last, relabeled as the rest (see _demo_mask)
            demo = self._relabeled_rows(self.demo_storage, self.demo_storage.sample_flat(n_demo, self.rng))
            batch = GatheredRows.joined(batch, demo)
        return batch, storage, flat

    def _relabeled_rows(self, storage: EpisodeStorage, flat: np.ndarray) -> GatheredRows:
        """The rows at ``flat``, a fraction k/(k+1) of them with hindsight goals (n-step ones with ``n_steps`` > 1)."""
        batch = GatheredRows(storage, flat)
        n = len(flat)
        n_her = relabel_count(n, self.relabel_mix.n_sampled_goal, self.rng)
        if n_her:
            rows = slice(n - n_her, n)  # rows are i.i.d., so which ones is immaterial
            self._relabel(storage, flat[rows], rows, batch)
        if self.n_steps > 1:
            self._n_step(storage, flat, batch)
        return batch

    def _step_values(self, storage: EpisodeStorage, at: np.ndarray, batch: GatheredRows,
                     rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reward and termination of the stored steps at ``at`` for the goals of ``rows`` of ``batch``."""
        if not self._probe_done:
            self._probe()
        goal = batch.state("desired_goal")
        goals = goal[rows if isinstance(goal, np.ndarray) else torch.from_numpy(rows).to(goal.device)]
        if self._info_specs or self.reward_context:  # the reward reads more than the goals: the whole rows
            step = GatheredRows(storage, at)
            step.state("desired_goal")[...] = goals
            step.next_state("desired_goal")[...] = goals
            info = self._reward_info(step, slice(None))
            achieved = step.next_state("achieved_goal")
        else:
            achieved = storage.next_state("achieved_goal", at)
            info = InfoBatch({}, len(achieved))
        achieved, goals = to_numpy(achieved), to_numpy(goals)
        n = len(at)
        rewards = goal_function_values(self._compute_reward(achieved, goals, info), n, "compute_reward")
        if self._compute_terminated is not None:
            done = goal_function_values(self._compute_terminated(achieved, goals, info), n, "compute_terminated")
        else:
            done = to_numpy(storage.field("t", "terminated", at))
        return np.asarray(rewards, dtype=np.float64), np.asarray(done) > 0

    def _n_step_next_states(self, batch: GatheredRows, rows: np.ndarray) -> None:
        goal = batch.state("desired_goal")
        index = rows if isinstance(goal, np.ndarray) else torch.from_numpy(rows).to(goal.device)
        batch.next_state("desired_goal")[index] = goal[index]

    def _relabel(self, storage: EpisodeStorage, flat: np.ndarray, rows: slice, batch: GatheredRows) -> None:
        """Give ``rows`` of ``batch`` (stored at ``flat``) new goals and recompute what depends on the goal, in place."""
        if not self._probe_done:
            self._probe()
        goals = self._hindsight_goals(storage, flat)
        batch.state("desired_goal")[rows] = goals
        batch.next_state("desired_goal")[rows] = goals
        achieved = batch.next_state("achieved_goal")[rows]
        info = self._reward_info(batch, rows)
        # one call per batch, goals by keyword (see goal_functions.bind_goal_function); reward
        # functions get NumPy arrays whatever the storage device
        achieved, goals = to_numpy(achieved), to_numpy(goals)
        n = len(achieved)
        new_rewards = goal_function_values(self._compute_reward(achieved, goals, info), n, "compute_reward")
        rewards = batch.transition("reward")
        rewards[rows] = new_rewards if isinstance(rewards, np.ndarray) else torch.from_numpy(new_rewards).to(rewards.device)
        if self._compute_terminated is not None:
            done = goal_function_values(self._compute_terminated(achieved, goals, info), n, "compute_terminated")
            terminated = batch.transition("terminated")
            terminated[rows] = done if isinstance(terminated, np.ndarray) else torch.from_numpy(done).to(terminated.device)

    def _reward_info(self, batch: GatheredRows, rows: slice) -> InfoBatch:
        """The ``info`` that ``compute_reward`` gets for ``rows`` of ``batch``: stored info entries and reward
        context, by entry and by row (:class:`~herl.buffers.goal_functions.InfoBatch`)."""
        info = {name[len(INFO_PREFIX):]: to_numpy(batch.transition(name)[rows]) for name in self._info_specs}
        for name in self.reward_context:
            if name == "action":
                info[name] = to_numpy(batch.transition("action")[rows])
            elif name.startswith("next_"):
                info[name] = to_numpy(batch.next_state(name[len("next_"):])[rows])
            else:
                info[name] = to_numpy(batch.state(name)[rows])
        return InfoBatch(info, len(batch.next_state("achieved_goal")[rows]))

    def _hindsight_goals(self, storage: EpisodeStorage, flat: np.ndarray) -> np.ndarray:
        """Goals to relabel the transitions at ``flat`` with (copies, never views of storage): the strategy's
        achieved goals, the last ``desired_goal_share`` of them (a binomial count; rows are i.i.d.) desired goals
        of other stored transitions."""
        share = self.relabel_mix.desired_goal_share
        n_desired = int(self.rng.binomial(len(flat), share)) if share else 0
        if not n_desired:
            return self._strategy_goals(storage, flat)
        source = storage.sample_flat(n_desired, self.rng, uniform=True)
        desired = storage.field("s", "desired_goal", source)
        if n_desired == len(flat):
            return desired
        goals = self._strategy_goals(storage, flat[: len(flat) - n_desired])
        return np.concatenate([goals, desired]) if isinstance(goals, np.ndarray) else torch.cat([goals, desired])

    def _strategy_goals(self, storage: EpisodeStorage, flat: np.ndarray) -> np.ndarray:
        """The achieved goals the goal selection strategy picks for the transitions at ``flat``."""
        strategy = self.relabel_mix.strategy
        if strategy is GoalSelectionStrategy.RANDOM:
            # offline, episodes are moved to the main store as they end: that is where every stored
            # state lives (the staging area holds little more than the episode being relabeled)
            offline_store = None if self.online_sampling else self.relabeled
            source_store = offline_store if offline_store is not None and offline_store.n_transitions else storage
            complete_only = source_store.n_transitions > source_store.n_open
            source = source_store.sample_flat(len(flat), self.rng, complete_only=complete_only, uniform=True)
            return source_store.next_state("achieved_goal", source)
        offsets, lengths = storage.episode_position(flat)
        if type(self).goal_steps is HerReplayBuffer.goal_steps:
            chosen = self.goal_steps(offsets, lengths)
        else:  # a strategy of the user's: its steps checked before they index the storage
            chosen = np.asarray(self.goal_steps(offsets.copy(), lengths.copy()))
            whole = chosen.shape == offsets.shape and chosen.dtype.kind in "iu"
            if not whole or np.any(chosen < 0) or np.any(chosen >= lengths):
                got = f"from {chosen.min()} to {chosen.max()}" if whole else f"{chosen.dtype} of shape {chosen.shape}"
                raise ValueError(
                    f"{type(self).__name__}.goal_steps must return one whole number per transition, each within its "
                    f"episode (0 <= step < length): got {got} for {len(offsets)} transitions")
        return storage.next_state("achieved_goal", storage.shift(flat, chosen - offsets))

    def goal_steps(self, steps: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """For transitions at step ``steps[i]`` (0-based) of stored episodes of ``lengths[i]`` steps (so far, for
        an episode still running), the step ``j`` (``0 <= j < lengths[i]``) whose outcome, the achieved goal after
        step ``j``, relabels each: the goal selection strategy's rule (``future``: uniform over ``steps[i] .. lengths[i] - 1``, the transition's own
        outcome included; ``final``: the last; ``episode``: uniform over the episode). Not called for ``random``.

        A subclass overrides it for a strategy of its own (online and offline relabeling, n-step returns and
        prioritized replay all go through it), drawing from ``self.rng`` so that a seed repeats it; the steps it
        returns are checked before they are used."""
        strategy = self.relabel_mix.strategy
        if strategy is GoalSelectionStrategy.FUTURE:
            # sample_goal_offsets' draw, as steps ahead of each transition: floor(u * (L - t)) rows further
            return steps + (self.rng.random(len(steps)) * (lengths - steps)).astype(np.int64)
        return sample_goal_offsets(strategy, steps, lengths, self.rng)

    def sample(self, batch_size: int, env: Any = None, *, beta: float | None = None) -> DictReplayBufferSamples:
        """Draw ``batch_size`` transitions, a fraction k/(k+1) of them with hindsight goals.

        With prioritized replay, a relabeled transition shares its stored transition's priority. With
        demonstrations, the batch's last ``demo_rows(batch_size)`` rows come from them, and its ``demo_mask``
        marks them.
        """
        samples = super().sample(batch_size, env, beta=beta)
        if self.demo_storage is None:
            return samples
        return samples._replace(demo_mask=self._demo_mask(int(batch_size)))

    def _prioritized_storage(self) -> EpisodeStorage:
        return self.storage if self.online_sampling else self.relabeled

    def __len__(self) -> int:
        if not self.online_sampling:
            return self.relabeled.n_transitions
        return self.storage.n_transitions

    # ------------------------------------------------------------------ persistence
    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "n_sampled_goal": self.n_sampled_goal,
            "goal_selection_strategy": self.goal_selection_strategy.name.lower(),
            "desired_goal_share": self.desired_goal_share,
            "copy_info_dict": self.copy_info_dict,
            "online_sampling": self.online_sampling,
            "max_episode_length": self.max_episode_length,
            "info_keys": self.info_keys,
            "reward_context": list(self.reward_context),
            "demo_batch_ratio": self.demo_batch_ratio,
            "demo_rows": 0 if self.demo_storage is None else self.demo_storage.rows,
        }

    def _storages(self) -> dict[str, EpisodeStorage]:
        out = {"storage": self.storage}
        if not self.online_sampling:
            out["relabeled"] = self.relabeled
        if self.demo_storage is not None:
            out["demos"] = self.demo_storage
        return out

    def reset(self) -> None:
        """Forget every transition added; the demonstrations stay."""
        for name, storage in self._storages().items():
            if name != "demos":
                storage.clear()

    @classmethod
    def settings_from_file(cls, settings: Mapping[str, Any], source: str) -> dict[str, Any]:
        """The settings without the options removed since the file was written (with a note that they are ignored)."""
        return drop_removed_options(settings, source)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        env: Any = None,
        *,
        compute_reward: Callable | None = None,
        compute_terminated: Callable | None = None,
        device: torch.device | str = "auto",
        seed: int | None = None,
        **settings: Any,
    ) -> HerReplayBuffer:
        """Read a buffer saved by :meth:`save`. Reward functions are code, so they are not in the file:
        pass ``env`` or ``compute_reward`` again. ``settings``: a subclass's own constructor settings, which the file
        (herl's settings only) does not keep."""
        meta, arrays, obs_space, act_space = cls._read(path)
        with _file_errors(path):
            config = dict(meta["config"])
            demo_rows = config.pop("demo_rows", 0)
            buffer = cls(
                observation_space=obs_space, action_space=act_space, env=env, device=device,
                compute_reward=compute_reward, compute_terminated=compute_terminated, **config,
                **own_settings(path, config, settings),
            )
            if demo_rows:  # the demonstrations are in the file: no dataset is read
                buffer.demo_storage = buffer._demo_store(demo_rows)
            prefix = "storage/transition/" + INFO_PREFIX
            for name, array in arrays.items():
                if name.startswith(prefix):
                    buffer._declare_info_field(name[len("storage/transition/"):], FieldSpec(array.shape[2:], array.dtype))
            buffer._restore(meta, arrays, seed)
        if buffer._info_specs:
            buffer._probe()
        return buffer

    FILE_CONFIG: ClassVar[dict[str, Rule | None]] = {
        **ReplayBuffer.FILE_CONFIG, "n_sampled_goal": NON_NEGATIVE_INT,
        "goal_selection_strategy": one_of("future", "final", "episode", "random"), "copy_info_dict": BOOL,
        "desired_goal_share": DESIRED_GOAL_SHARE,
        "online_sampling": BOOL, "max_episode_length": POSITIVE_INT,
        "info_keys": None, "reward_context": None,  # lists of names, checked by the constructor
        "demo_batch_ratio": DEMO_BATCH_RATIO, "demo_rows": NON_NEGATIVE_INT,
    }

    @classmethod
    def _file_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, int]]:
        demos = {"demos": (max(config["demo_rows"], 2), 1)} if config.get("demo_rows") else {}
        if config.get("online_sampling", True):
            return {**super()._file_shapes(config), **demos}
        return {"storage": (config.get("max_episode_length", DEFAULT_MAX_EPISODE_LENGTH) + 1, config.get("n_envs", 1)),
                "relabeled": (max(config.get("buffer_size", 1), 1), 1)}


def _sb3_1x_arguments(buffer_size: Any, env: Any, wrapped_env: Any, env_info: Any) -> Any:
    """The goal env, from SB3 2.x's ``env`` or SB3 1.x's ``wrapped_env``; SB3 1.x's call shapes get a message that
    says what changed (SB3 1.6 made the buffer take ``(buffer_size, observation_space, action_space, env=...)``)."""
    if buffer_size is not None and not isinstance(buffer_size, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"HerReplayBuffer's first argument is buffer_size, got {type(buffer_size).__name__}: since SB3 1.6 it is "
            "HerReplayBuffer(buffer_size, observation_space, action_space, env=goal_env, ...)"
        )
    if isinstance(env, Mapping) or env_info is not None:
        raise TypeError(
            "env_info is not an argument of HerReplayBuffer (the 4th argument is env since SB3 1.6): pass env=goal_env, "
            "whose compute_reward relabels the goals"
        )
    if wrapped_env is not None:
        if env is not None and env is not wrapped_env:
            raise ValueError("pass the goal env once: env= (wrapped_env= is its name before SB3 1.6)")
        return wrapped_env
    return env


def _vec_normalize(env: Any) -> Any:
    """The SB3 ``VecNormalize`` in a VecEnv's wrapper chain (recognized by its interface), or None."""
    while env is not None:
        if hasattr(env, "obs_rms") and hasattr(env, "unnormalize_obs"):
            return env
        env = getattr(env, "venv", None)
    return None


def _time_limit(env: Any) -> int | None:
    spec = getattr(env, "spec", None)
    if spec is None and hasattr(env, "get_attr") and hasattr(env, "env_method"):  # an SB3 VecEnv: its first env's
        try:
            spec = env.get_attr("spec", indices=[0])[0]
        except AttributeError:
            spec = None
    steps = getattr(spec, "max_episode_steps", None)
    return int(steps) if steps else None


def _info_values(infos: Any, key: str, n_envs: int) -> np.ndarray:
    if isinstance(infos, Mapping):  # gymnasium vector env: arrays over envs
        # in SAME_STEP autoreset mode, an env whose episode ended has its last step's info in infos["final_info"]
        # (masked by "_final_info"); the top level holds its reset's info
        final, ended = infos.get("final_info"), infos.get("_final_info")
        ended = np.asarray(ended, dtype=bool).reshape(-1) if isinstance(final, Mapping) and ended is not None else None
        if ended is not None and ended.any() and key in final:
            last = np.asarray(final[key])
            if key not in infos and ended.all():
                return last.reshape(n_envs, *last.shape[1:])
            if key in infos:
                values = np.array(infos[key]).reshape(n_envs, *np.shape(infos[key])[1:])
                values[ended] = last.reshape(n_envs, *last.shape[1:])[ended]
                return values
        if key not in infos:
            raise ValueError(f"info key {key!r} is missing at this step: every step's info must carry the info_keys")
        return np.asarray(infos[key]).reshape(n_envs, *np.shape(infos[key])[1:])
    try:
        return np.stack([np.asarray(info[key]) for info in infos])
    except KeyError:
        raise ValueError(f"info key {key!r} is missing at this step: every step's info must carry the info_keys") from None
