"""Stable-Baselines (SB2) HER interface on herl's engine and algorithms.

SB2 users wrote ``HER("MlpPolicy", env, DQN, n_sampled_goal=4, goal_selection_strategy="future")``
and, for their own loops, wrapped a goal env in ``HERGoalEnvWrapper`` and a replay buffer in
``HindsightExperienceReplayWrapper``. The same calls work here, as thin layers over
:class:`herl.HerReplayBuffer` and herl's DQN, DDPG, TD3 and SAC, with what hurt SB2 users fixed:
``predict`` takes dict observations directly (no env needed to load and act), and envs speak
gymnasium's five-tuple step API.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from herl.buffers import HerReplayBuffer, ReplayBuffer
from herl.buffers.goal_functions import InfoBatch, bind_goal_function, env_goal_function
from herl.buffers.her import GOAL_KEYS, check_goal_space
from herl.buffers.strategies import GoalSelectionStrategy, parse_strategy
from herl.errors import NON_NEGATIVE_INT, as_integer, integer

__all__ = ["HER", "HERGoalEnvWrapper", "HindsightExperienceReplayWrapper", "GoalSelectionStrategy"]


class HERGoalEnvWrapper(gym.ObservationWrapper):
    """A goal env seen through one flat observation: ``[observation, achieved_goal, desired_goal]``.

    For algorithms and loops that take flat vectors. ``compute_reward`` still works on goals;
    :meth:`convert_obs_to_dict` undoes the flattening.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        check_goal_space(env.observation_space)
        subspaces = [env.observation_space[k] for k in GOAL_KEYS]
        self.spaces = subspaces
        self._sizes = [int(np.prod(s.shape)) for s in subspaces]
        self._shapes = [s.shape for s in subspaces]
        self._splits = np.cumsum(self._sizes)[:-1]
        if all(isinstance(s, spaces.MultiBinary) for s in subspaces):
            self.observation_space = spaces.MultiBinary(sum(self._sizes))
        elif all(isinstance(s, spaces.Box) for s in subspaces):
            low = np.concatenate([np.broadcast_to(s.low, s.shape).ravel() for s in subspaces])
            high = np.concatenate([np.broadcast_to(s.high, s.shape).ravel() for s in subspaces])
            dtype = np.result_type(*(s.dtype for s in subspaces))
            self.observation_space = spaces.Box(low.astype(dtype), high.astype(dtype), dtype=dtype)
        elif all(isinstance(s, spaces.Discrete) for s in subspaces):  # as SB2: one entry of each
            self.observation_space = spaces.MultiDiscrete([int(s.n) for s in subspaces],
                                                          start=[int(s.start) for s in subspaces])
        else:
            raise ValueError(
                "HERGoalEnvWrapper flattens goal spaces that are all Box, all MultiBinary or all Discrete; this env's "
                f"are {[type(s).__name__ for s in subspaces]}: use the dict observations directly (herl's algorithms "
                "take them)"
            )

    def observation(self, observation: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.convert_dict_to_obs(observation)

    def convert_dict_to_obs(self, obs_dict: Mapping[str, np.ndarray]) -> np.ndarray:
        """One observation (or a batch with a leading axis) as a flat vector."""
        parts = [np.asarray(obs_dict[k]) for k in GOAL_KEYS]
        batched = parts[0].ndim > len(self._shapes[0])
        if batched:
            return np.concatenate([p.reshape(p.shape[0], -1) for p in parts], axis=1)
        return np.concatenate([p.ravel() for p in parts])

    def convert_obs_to_dict(self, observations: np.ndarray) -> OrderedDict:
        """Inverse of :meth:`convert_dict_to_obs` (one vector or a batch)."""
        observations = np.asarray(observations)
        pieces = np.split(observations, self._splits, axis=-1)
        lead = observations.shape[:-1]
        return OrderedDict(
            (k, piece.reshape(lead + shape).astype(space.dtype, copy=False))
            for k, piece, shape, space in zip(GOAL_KEYS, pieces, self._shapes, self.spaces)
        )

    def compute_reward(self, achieved_goal, desired_goal, info):
        return self.env.unwrapped.compute_reward(achieved_goal, desired_goal, info)


class _PerGoalReward:
    """An SB2 goal env's ``compute_reward`` on herl's batches of goals.

    SB2's HER called ``compute_reward`` once per transition, with one goal, as gym's ``GoalEnv`` documents it;
    herl relabels whole batches. A function that answers a batch with one value per goal is called on batches; one
    that returns a single value for a batch (or fails on one) is called goal by goal from then on, slower but as in
    SB2. The first batch of two or more goals decides.
    """

    rebuilt_on_load = True
    """``HER.load`` makes it again from the env: a model file need not hold it (saving says nothing of it)."""

    def __init__(self, fn: Any) -> None:
        self._call = bind_goal_function(fn)
        self._per_goal: bool | None = None

    def __call__(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> Any:
        n = len(achieved_goal)
        if not self._per_goal:
            if self._per_goal is False or n < 2:
                return self._call(achieved_goal, desired_goal, info)
            try:
                result = self._call(achieved_goal, desired_goal, info)
            except Exception:  # e.g. float() of an array: a function written for one goal
                result = None
            if result is not None and np.shape(result) in ((n,), (n, 1)):
                self._per_goal = False
                return result
            self._per_goal = True
        rows = list(info) if isinstance(info, InfoBatch) else [info] * n
        return np.stack([np.asarray(self._call(a, d, i)) for a, d, i in zip(achieved_goal, desired_goal, rows)])


def _sb2_compute_reward(env: Any) -> _PerGoalReward | None:
    fn = env_goal_function(env, "compute_reward")
    return _PerGoalReward(fn) if fn is not None else None


class HindsightExperienceReplayWrapper:
    """SB2's replay wrapper: ``add`` transitions with flat observations, relabeled when an episode ends.

    ``replay_buffer`` gives the capacity (a herl :class:`~herl.ReplayBuffer`, whose size is used, or
    an int); the transitions live in a :class:`~herl.HerReplayBuffer` relabeling offline, as SB2 did.
    ``wrapped_env`` is the :class:`HERGoalEnvWrapper` whose flattening the observations use.
    """

    def __init__(self, replay_buffer: ReplayBuffer | int, n_sampled_goal: int,
                 goal_selection_strategy: GoalSelectionStrategy | str, wrapped_env: HERGoalEnvWrapper,
                 *, seed: int | None = None) -> None:
        if not isinstance(wrapped_env, HERGoalEnvWrapper):
            raise TypeError("wrapped_env must be a HERGoalEnvWrapper: wrap the goal env with HERGoalEnvWrapper(env)")
        owner = "HindsightExperienceReplayWrapper"  # herl's rules, not int(): int(nan) named no argument
        size = replay_buffer.buffer_size * replay_buffer.n_envs if isinstance(replay_buffer, ReplayBuffer) else \
            as_integer(owner, "replay_buffer", replay_buffer, integer(1, note="a herl ReplayBuffer, or its capacity"))
        n_sampled_goal = as_integer(owner, "n_sampled_goal", n_sampled_goal, NON_NEGATIVE_INT)
        self.env = wrapped_env
        self.n_sampled_goal = n_sampled_goal
        self.goal_selection_strategy = parse_strategy(goal_selection_strategy)
        self.buffer = HerReplayBuffer(
            size, wrapped_env.env.observation_space, wrapped_env.action_space, env=wrapped_env.env, device="cpu",
            compute_reward=_sb2_compute_reward(wrapped_env.env),
            n_sampled_goal=n_sampled_goal, goal_selection_strategy=self.goal_selection_strategy,
            online_sampling=False, max_episode_length=_time_limit(wrapped_env), seed=seed,
        )

    def add(self, obs_t: np.ndarray, action: Any, reward: float, obs_tp1: np.ndarray, done: bool,
            *, truncated: bool = False) -> None:
        """Store one transition. ``done`` ends the episode (and triggers relabeling); pass
        ``truncated=True`` too when it ended on a time limit, so that its value is bootstrapped."""
        ended = bool(done)
        self.buffer.add(
            self.env.convert_obs_to_dict(obs_t), self.env.convert_obs_to_dict(obs_tp1), np.asarray(action),
            np.float32(reward), terminated=ended and not truncated, truncated=ended and bool(truncated),
        )

    def can_sample(self, n_samples: int) -> bool:
        """Whether ``n_samples`` relabeled transitions are stored (sampling is with replacement, as SB2)."""
        return len(self) >= n_samples

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, batch_size: int) -> tuple[np.ndarray, ...]:
        """SB2's batch: ``(obs_t, actions, rewards, obs_tp1, dones)`` as NumPy arrays, observations flat."""
        batch = self.buffer.sample(batch_size)
        flat = self.env.convert_dict_to_obs
        obs = flat({k: v.numpy() for k, v in batch.observations.items()})
        next_obs = flat({k: v.numpy() for k, v in batch.next_observations.items()})
        actions = batch.actions.numpy()
        if isinstance(self.env.action_space, spaces.Discrete):
            actions = actions.reshape(-1)  # SB2 stored a discrete action as a number: (batch,)
        return obs, actions, batch.rewards.numpy().ravel(), next_obs, batch.dones.numpy().ravel()


# Stable-Baselines 2.10's defaults for each model class (the signatures in its docs), in herl's names. Under HER
# they replace SB3's, so that an SB2 script learns as it did: SB3's DQN updates its target network every 10,000
# steps, SB2's every 500, and the SB2 HER page's bit-flipping example learns many times slower with the former.
SB2_DEFAULTS: dict[str, dict[str, Any]] = {
    "DQN": dict(learning_rate=5e-4, buffer_size=50_000, learning_starts=1000, batch_size=32, train_freq=1,
                target_update_interval=500, exploration_fraction=0.1, exploration_initial_eps=1.0,
                exploration_final_eps=0.02, double_q=True, gamma=0.99),
    "SAC": dict(learning_rate=3e-4, buffer_size=50_000, learning_starts=100, batch_size=64, train_freq=1,
                gradient_steps=1, tau=0.005, gamma=0.99),
    "TD3": dict(learning_rate=3e-4, buffer_size=50_000, learning_starts=100, batch_size=128, train_freq=100,
                gradient_steps=100, tau=0.005, gamma=0.99),
    # SB2's DDPG collects nb_rollout_steps=100 steps, then takes nb_train_steps=50 gradient steps, from the start
    "DDPG": dict(actor_learning_rate=1e-4, critic_learning_rate=1e-3, buffer_size=50_000, learning_starts=0,
                 batch_size=128, train_freq=100, gradient_steps=50, tau=0.001, gamma=0.99),
}
SB2_LAYERS = [64, 64]  # SB2's MlpPolicy for DQN, DDPG, SAC and TD3
SB2_POLICIES = {"MlpPolicy": ("MlpPolicy", {}), "LnMlpPolicy": ("MlpPolicy", {"layer_norm": True}),
                "MultiInputPolicy": ("MultiInputPolicy", {})}
"""The policy names HER takes: herl's policy and the policy kwargs each stands for (SB2's LnMlpPolicy: a layer norm
before each hidden activation of the actor and the critics, or of DQN's Q-network)."""

# SB2's keyword -> herl's (model hyperparameter, or "buffer:<name>" for the replay buffer), per model class
_SB2_RENAMES: dict[str, dict[str, str]] = {
    "DQN": {"target_network_update_freq": "target_update_interval", "prioritized_replay": "buffer:prioritized",
            "prioritized_replay_alpha": "buffer:alpha", "prioritized_replay_beta0": "buffer:beta",
            "prioritized_replay_eps": "buffer:priority_eps"},
    "SAC": {"random_exploration": "random_action_prob"},
    "TD3": {"random_exploration": "random_action_prob"},
    "DDPG": {"random_exploration": "random_action_prob", "actor_lr": "actor_learning_rate",
             "critic_lr": "critic_learning_rate", "nb_train_steps": "gradient_steps", "nb_rollout_steps": "train_freq",
             "memory_limit": "buffer_size",  # read before the others (sb2_kwargs), as SB2 does
             "observation_range": "clip_observations", "return_range": "clip_target"},
}
# SB2 keywords herl takes only at the value that means "off" (SB2's default), with why
_SB2_OFF_ONLY: dict[str, tuple[tuple[Any, ...], str]] = {
    "param_noise": ((None, False), "parameter-space noise is not implemented: use action_noise or random_exploration"),
    "prioritized_replay_beta_iters": ((None,), "beta stays at prioritized_replay_beta0 (set buffer.beta to anneal it)"),
    "normalize_returns": ((False,), "return normalization (PopArt) is not implemented"),
    "enable_popart": ((False,), "PopArt is not implemented"),
    "critic_l2_reg": ((0, 0.0), "critic weight decay is not implemented"),
    "clip_norm": ((None,), "gradient clipping of DDPG is not implemented"),
    "reward_scale": ((1, 1.0), "reward scaling is not implemented: scale the env's rewards and compute_reward alike"),
    "memory_policy": ((None,), "herl's replay buffer is a HerReplayBuffer under HER"),
    "eval_env": ((None,), "evaluate with herl.EvalCallback(eval_env, ...) passed to learn(callback=...)"),
    "render": ((False,), "render the env in a callback"),
    "render_eval": ((False,), "render the env in a callback"),
}
# SB2 keywords with nothing to do in herl (TensorFlow sessions and graphs, evaluation steps of DDPG's own loop)
_SB2_IGNORED = frozenset({"_init_setup_model", "full_tensorboard_log", "n_cpu_tf_sess", "nb_eval_steps",
                          "param_noise_adaption_interval"})
# keyword arguments of herl's model constructors besides hyperparameters
_MODEL_ARGUMENTS = frozenset({"action_noise", "replay_buffer_kwargs", "policy_kwargs", "tensorboard_log", "verbose",
                              "seed", "device", "n_envs", "online_sampling"})


def sb2_kwargs(model_class: type, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """SB2's keyword arguments of ``model_class`` under HER as herl's: ``(model kwargs, replay buffer kwargs)``.

    SB2's defaults fill what is not given; SB2's names are renamed; anything unknown is a TypeError
    that suggests the closest known name.
    """
    name = model_class.__name__
    renames = _SB2_RENAMES.get(name, {})
    hyperparameters = {f.name for f in dataclasses.fields(model_class.config_class)}
    known = hyperparameters | _MODEL_ARGUMENTS | set(renames) | set(_SB2_OFF_ONLY) | _SB2_IGNORED
    model_kwargs: dict[str, Any] = dict(SB2_DEFAULTS.get(name, {}))
    buffer_kwargs: dict[str, Any] = {}
    if "memory_limit" in renames and "memory_limit" in kwargs:
        # SB2's DDPG: deprecated for buffer_size; its default, None, changes nothing, a number replaces buffer_size
        kwargs = dict(kwargs)
        limit = kwargs.pop("memory_limit")
        if limit is not None:
            kwargs["buffer_size"] = limit
    for key, value in kwargs.items():
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f": did you mean {close[0]!r}?" if close else f"; {name} under HER takes {sorted(known)}"
            raise TypeError(f"HER got an unknown argument {key!r} for {name}{hint}")
        if key in _SB2_IGNORED:
            continue
        if key in _SB2_OFF_ONLY:
            allowed, why = _SB2_OFF_ONLY[key]
            if value not in allowed:
                raise ValueError(f"{key}={value!r} is not supported by herl ({why}); leave it at {allowed[0]!r}")
            continue
        target = renames.get(key, key)
        if target.startswith("buffer:"):
            buffer_kwargs[target[len("buffer:"):]] = value
        else:
            model_kwargs[target] = _sb2_value(key, value)
    model_kwargs["policy_kwargs"] = _sb2_policy_kwargs(model_kwargs.get("policy_kwargs"))
    if name == "DQN":  # SB2's DQN policies are dueling unless told otherwise
        model_kwargs["policy_kwargs"].setdefault("dueling", True)
    return model_kwargs, buffer_kwargs


def _sb2_value(key: str, value: Any) -> Any:
    """SB2's values in herl's form where they differ (ranges)."""
    if key == "observation_range":  # SB2 clips normalized observations to (low, high)
        low, high = value
        if low != -high:
            raise ValueError(f"observation_range={value!r}: herl clips normalized observations symmetrically, (-c, c)")
        return float(high)
    if key == "return_range":
        low, high = value
        return False if (low, high) == (-np.inf, np.inf) else (float(low), float(high))
    return value


def _sb2_policy_kwargs(policy_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """SB2's ``policy_kwargs=dict(layers=[...])`` as ``net_arch``; SB2's [64, 64] when no size is given."""
    out = dict(policy_kwargs or {})
    if "layers" in out:
        if "net_arch" in out:
            raise ValueError("policy_kwargs has both layers (SB2's name) and net_arch: give one")
        out["net_arch"] = list(out.pop("layers"))
    if "act_fun" in out:
        raise ValueError("policy_kwargs act_fun is a TensorFlow function in SB2: use activation_fn=torch.nn.ReLU "
                         "(or 'relu', 'tanh', ...)")
    out.setdefault("net_arch", list(SB2_LAYERS))
    return out


class HER:
    """SB2's HER model wrapper: ``HER(policy, env, model_class, n_sampled_goal=4, goal_selection_strategy="future", **kwargs)``.

    ``model_class`` is herl's DQN, DDPG, TD3 or SAC; other keyword arguments go to it, with SB2's names
    (``target_network_update_freq``, ``actor_lr``, ``random_exploration``, ``policy_kwargs=dict(layers=...)``, ...)
    and SB2's defaults (:data:`SB2_DEFAULTS`; see docs/migrating.md for the table). The model learns with a
    :class:`~herl.HerReplayBuffer` (online relabeling by default; pass ``online_sampling=False`` for SB2's
    relabel-at-episode-end).
    """

    def __init__(self, policy: str, env: Any, model_class: type, n_sampled_goal: int = 4,
                 goal_selection_strategy: GoalSelectionStrategy | str = "future", *args: Any, **kwargs: Any) -> None:
        from herl.algorithms import ALGORITHMS

        if getattr(model_class, "__name__", None) not in ALGORITHMS or ALGORITHMS[model_class.__name__] is not model_class:
            raise ValueError(f"model_class must be one of herl's {sorted(ALGORITHMS)}, got {model_class!r}")
        if args:
            raise TypeError("pass the model's arguments by keyword (HER forwards **kwargs to model_class)")
        self.model_class = model_class
        self.n_sampled_goal = n_sampled_goal = as_integer("HER", "n_sampled_goal", n_sampled_goal, NON_NEGATIVE_INT)
        self.goal_selection_strategy = parse_strategy(goal_selection_strategy)
        kwargs, sb2_buffer_kwargs = sb2_kwargs(model_class, kwargs)
        buffer_kwargs = {"n_sampled_goal": n_sampled_goal,
                         "goal_selection_strategy": self.goal_selection_strategy.name.lower(), **sb2_buffer_kwargs}
        if "online_sampling" in kwargs:
            buffer_kwargs["online_sampling"] = kwargs.pop("online_sampling")
        buffer_kwargs.update(kwargs.pop("replay_buffer_kwargs", None) or {})
        self._env, env = _goal_env(env)
        if buffer_kwargs.get("compute_reward") is None:
            buffer_kwargs["compute_reward"] = _sb2_compute_reward(env)
        if policy not in SB2_POLICIES:
            raise ValueError(f"unknown policy {policy!r}: use one of {sorted(SB2_POLICIES)} (SB2's CnnPolicy and "
                             "policy classes are not supported)")
        herl_policy, fixed = SB2_POLICIES[policy]
        for key, value in fixed.items():
            if kwargs["policy_kwargs"].setdefault(key, value) != value:
                raise ValueError(f"{policy} sets policy_kwargs {key}={value!r}; got {key}="
                                 f"{kwargs['policy_kwargs'][key]!r}: use MlpPolicy with it")
        self.policy = policy
        self.model = model_class(herl_policy, env, replay_buffer_class=HerReplayBuffer,
                                 replay_buffer_kwargs=buffer_kwargs, **kwargs)

    # ------------------------------------------------------------------ SB2 methods
    def setup_model(self) -> None:
        """SB2 built its TensorFlow graph here; herl's model is ready at construction, so this does nothing."""

    def get_env(self) -> Any:
        """The current env, as it was given (a HERGoalEnvWrapper stays one); None without one."""
        return self._env

    def set_env(self, env: Any) -> None:
        shown, env = _goal_env(env)
        self.model.set_env(env)
        self._env = shown

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int = 100, tb_log_name: str = "HER",
              reset_num_timesteps: bool = True) -> HER:
        """Train; ``callback`` may be a herl/SB3 callback or SB2's ``callback(locals_, globals_) -> bool``."""
        self.model.learn(total_timesteps, callback=callback, log_interval=log_interval, tb_log_name=tb_log_name,
                         reset_num_timesteps=reset_num_timesteps)
        return self

    def predict(self, observation: Any, state: Any = None, mask: Any = None, deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Action for a dict observation (or a batch), or for a flat one from :class:`HERGoalEnvWrapper`."""
        return self.model.predict(self._as_dict(observation), state, deterministic=deterministic)

    def action_probability(self, observation: Any, state: Any = None, mask: Any = None, actions: Any = None,
                           logp: bool = False) -> Any:
        """The policy's distribution at ``observation`` (SB2's semantics).

        * DQN (Discrete): probabilities of each action, a softmax over the Q-values (as SB2's DQN).
        * SAC (Box): ``[mean, std]`` of the Gaussian *before* the tanh squashing, in the policy's
          [-1, 1] scale; with ``actions``, the density of those actions under the squashed policy.
        * DDPG and TD3 (Box, deterministic): ``[mean, std]`` with mean the action and std the
          exploration noise's scale (0 without noise); they have no density, so ``actions`` is refused.

        ``actions`` given: the probability (mass or density) of each, or its log with ``logp=True``.
        """
        model = self.model
        obs = self._as_dict(observation)
        batched = model._is_batch(obs)
        if not batched:
            obs = {k: np.asarray(v)[None] for k, v in obs.items()}
        with torch.no_grad():
            x = model.encoder.normalize(model.encoder.flatten_numpy(obs, model.device))
            result = self._distribution(x, actions, batched)
        if actions is not None and not logp:
            result = np.exp(result)
        if isinstance(result, list):
            return result if batched else [r[0] for r in result]
        return result if batched else result[0]

    def _distribution(self, x: torch.Tensor, actions: Any, batched: bool) -> Any:
        model, name = self.model, self.model_class.__name__
        if name == "DQN":
            log_probs = torch.log_softmax(model.q_net(x), dim=1).cpu().numpy()
            if actions is None:
                return np.exp(log_probs)
            chosen = np.asarray(actions, dtype=np.int64).reshape(len(log_probs), -1)[:, 0]
            return log_probs[np.arange(len(log_probs)), chosen]
        if name == "SAC":
            from herl.nn.policies import LOG_STD_MAX, LOG_STD_MIN

            mean, log_std = model.actor.net(x).chunk(2, dim=-1)
            log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
            if actions is None:
                return [mean.cpu().numpy(), log_std.exp().cpu().numpy()]
            scaled = torch.as_tensor(self._to_policy_scale(actions), dtype=mean.dtype, device=mean.device).reshape(mean.shape)
            scaled = scaled.clamp(-1 + 1e-6, 1 - 1e-6)
            pre_tanh = torch.atanh(scaled)
            gaussian = -0.5 * ((pre_tanh - mean) / log_std.exp()).square() - log_std - 0.5 * math.log(2 * math.pi)
            return (gaussian - torch.log1p(-scaled.square())).sum(dim=-1).cpu().numpy()
        if actions is not None:
            raise ValueError(f"{name} is a deterministic policy: its actions have no probability density")
        mean = model.actor(x).cpu().numpy()
        sigma = getattr(model.action_noise, "sigma", None)
        std = np.broadcast_to(np.asarray(sigma if sigma is not None else 0.0, dtype=np.float32), mean.shape).copy()
        return [mean, std]

    def _to_policy_scale(self, actions: Any) -> np.ndarray:
        space = self.model.action_space
        return 2.0 * (np.asarray(actions, dtype=np.float64) - space.low) / (space.high - space.low) - 1.0

    def _as_dict(self, observation: Any) -> Any:
        """Flat observations from HERGoalEnvWrapper are split back into the goal-env dict; anything else that is not
        a dict is refused with what was expected (it was a reshape error)."""
        if isinstance(observation, Mapping):
            return observation
        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], Mapping):
            # SB2's loop, obs = env.reset(), on a gymnasium env: reset() returns (obs, info)
            raise ValueError("predict got a tuple (observation, info), what a gymnasium env's reset() returns: unpack "
                             "it first, obs, info = env.reset() (and obs, reward, terminated, truncated, info = "
                             "env.step(action)); see docs/migrating.md, 'From Stable-Baselines (SB2)'")
        env = self.get_env()
        wrapper = _find_flat_wrapper(env) if env is not None else None
        if wrapper is None:
            wrapper = _FlatLayout(self.model.observation_space)
        sizes = [math.prod(shape) for shape in wrapper._shapes]
        try:
            array = np.asarray(observation)
        except (ValueError, TypeError) as err:
            array = None
            problem = f"not an array ({err})"
        else:
            problem = f"shape {array.shape}" + ("" if array.dtype.kind in "biuf" else f" and dtype {array.dtype}")
        if array is None or array.dtype.kind not in "biuf" or array.ndim not in (1, 2) or array.shape[-1] != sum(sizes):
            parts = ", ".join(f"{key} ({size})" for key, size in zip(GOAL_KEYS, sizes))
            raise ValueError(f"predict takes a dict observation with the keys {list(GOAL_KEYS)}, or a flat one of "
                             f"{sum(sizes)} numbers as HERGoalEnvWrapper makes it ([{parts}]), or a batch of flat ones "
                             f"shaped (batch, {sum(sizes)}); got {problem}")
        return wrapper.convert_obs_to_dict(array)

    def get_parameter_list(self) -> list[torch.Tensor]:
        """Every parameter that defines the model (networks and normalizer statistics)."""
        return [t for module in self.model.nets.values() for t in module.state_dict().values()]

    def get_parameters(self) -> dict[str, Any]:
        return self.model.get_parameters()

    def save(self, save_path: str | os.PathLike, cloudpickle: bool = False) -> None:
        """Write the model; the file records the algorithm and the HER settings (never pickle: ``cloudpickle`` must stay False)."""
        if cloudpickle:
            raise ValueError("herl never writes pickle files: save without cloudpickle=True")
        self.model.save(save_path)

    @classmethod
    def load(cls, load_path: str | os.PathLike, env: Any = None, custom_objects: Mapping[str, Any] | None = None,
             **kwargs: Any) -> HER:
        """Read a HER model; without ``env`` it predicts from dict observations."""
        from herl.training.base import OffPolicyAlgorithm

        shown, env = _goal_env(env)
        buffer_kwargs = dict(kwargs.pop("replay_buffer_kwargs", None) or {})
        if env is not None and buffer_kwargs.get("compute_reward") is None:
            buffer_kwargs["compute_reward"] = _sb2_compute_reward(env)  # an env's that takes one goal at a time too
        if buffer_kwargs:
            kwargs["replay_buffer_kwargs"] = buffer_kwargs
        model = OffPolicyAlgorithm.load(load_path, env=env, custom_objects=custom_objects, **kwargs)
        if not issubclass(model.replay_buffer_class, HerReplayBuffer):
            raise ValueError(f"{load_path} holds a {type(model).__name__} without HER: load it with {type(model).__name__}.load")
        her = cls.__new__(cls)
        her.model, her.model_class = model, type(model)
        her._env = shown
        ln = model.policy_name == "MlpPolicy" and model.policy_config.layer_norm is True
        her.policy = "LnMlpPolicy" if ln else model.policy_name
        her.n_sampled_goal = model.replay_buffer_kwargs.get("n_sampled_goal", 4)
        her.goal_selection_strategy = parse_strategy(model.replay_buffer_kwargs.get("goal_selection_strategy", "future"))
        return her

    def __getattr__(self, name: str) -> Any:
        # anything else (num_timesteps, replay_buffer, logger, ...) is the wrapped model's
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)


class _FlatLayout:
    """HERGoalEnvWrapper's split, from a dict space alone (for a model loaded without an env)."""

    def __init__(self, observation_space: spaces.Dict) -> None:
        self.spaces = [observation_space[k] for k in GOAL_KEYS]
        self._shapes = [s.shape for s in self.spaces]
        self._splits = np.cumsum([int(np.prod(s)) for s in self._shapes])[:-1]

    convert_obs_to_dict = HERGoalEnvWrapper.convert_obs_to_dict


def _find_flat_wrapper(env: Any) -> HERGoalEnvWrapper | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, HERGoalEnvWrapper):
            return env
        env = env.env
    return None


def _unwrap_flat(env: Any) -> Any:
    """herl's algorithms take the goal env's dict observations, so a HERGoalEnvWrapper is looked through."""
    wrapper = _find_flat_wrapper(env)
    return wrapper.env if wrapper is not None else env


def _goal_env(env: Any) -> tuple[Any, Any]:
    """``(what get_env returns, what herl's model gets)``: the env as given, looked through a HERGoalEnvWrapper for
    the model; an env id is made here for both (as SB2 made it), so that its compute_reward can be adapted
    (:class:`_PerGoalReward`)."""
    if isinstance(env, str):
        from herl.training.envs import make_env

        made = make_env(env)
        return made, made
    return env, _unwrap_flat(env)


def _time_limit(env: Any) -> int | None:
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None)
    return int(limit) if limit else getattr(env.unwrapped, "max_steps", None)
