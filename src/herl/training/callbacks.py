"""Callbacks with Stable-Baselines3's hook names and attributes, so callbacks written for SB3 keep working.

A callback sees ``model``, ``num_timesteps``, ``n_calls``, ``logger``, and ``locals``: a read-only
view of the training state at the current step (``new_obs``, ``rewards``, ``dones``, ``infos``,
``actions``, ``total_timesteps``), not the loop's own variables. A plain function
``callback(locals_, globals_) -> bool`` (Stable-Baselines 2's form) is accepted too.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np


class BaseCallback:
    """Subclass and override ``_on_step`` (return False to stop training) and the other hooks you need."""

    def __init__(self, verbose: int = 0) -> None:
        self.verbose = verbose
        self.model: Any = None
        self.n_calls = 0
        self.num_timesteps = 0
        self.locals: Mapping[str, Any] = MappingProxyType({})
        self.globals: Mapping[str, Any] = MappingProxyType({})
        self.parent: BaseCallback | None = None

    @property
    def logger(self):
        return self.model.logger

    @property
    def training_env(self) -> Any:
        return self.model.get_env()

    def init_callback(self, model: Any) -> None:
        self.model = model
        self._init_callback()

    def _init_callback(self) -> None:
        pass

    def on_training_start(self, locals_: Mapping[str, Any], globals_: Mapping[str, Any]) -> None:
        self.locals, self.globals = locals_, globals_
        self.num_timesteps = self.model.num_timesteps
        self._on_training_start()

    def _on_training_start(self) -> None:
        pass

    def on_rollout_start(self) -> None:
        self._on_rollout_start()

    def _on_rollout_start(self) -> None:
        pass

    def on_step(self) -> bool:
        """Called after every env step; False stops training."""
        self.n_calls += 1
        self.num_timesteps = self.model.num_timesteps
        return self._on_step()

    def _on_step(self) -> bool:
        return True

    def on_rollout_end(self) -> None:
        self._on_rollout_end()

    def _on_rollout_end(self) -> None:
        pass

    def on_training_end(self) -> None:
        self._on_training_end()

    def _on_training_end(self) -> None:
        pass

    def update_locals(self, locals_: Mapping[str, Any]) -> None:
        self.locals = locals_
        self.update_child_locals(locals_)

    def update_child_locals(self, locals_: Mapping[str, Any]) -> None:
        pass


class CallbackList(BaseCallback):
    """Several callbacks in order; training stops when any of them returns False."""

    def __init__(self, callbacks: Sequence[BaseCallback]) -> None:
        super().__init__()
        self.callbacks = list(callbacks)

    def _init_callback(self) -> None:
        for cb in self.callbacks:
            cb.init_callback(self.model)

    def _on_training_start(self) -> None:
        for cb in self.callbacks:
            cb.on_training_start(self.locals, self.globals)

    def _on_rollout_start(self) -> None:
        for cb in self.callbacks:
            cb.on_rollout_start()

    def _on_step(self) -> bool:
        go_on = True
        for cb in self.callbacks:
            go_on = cb.on_step() and go_on  # every callback sees every step
        return go_on

    def _on_rollout_end(self) -> None:
        for cb in self.callbacks:
            cb.on_rollout_end()

    def _on_training_end(self) -> None:
        for cb in self.callbacks:
            cb.on_training_end()

    def update_child_locals(self, locals_: Mapping[str, Any]) -> None:
        for cb in self.callbacks:
            cb.update_locals(locals_)


class FunctionCallback(BaseCallback):
    """Stable-Baselines 2's ``callback(locals_, globals_) -> bool``, called after every step (None means go on)."""

    def __init__(self, fn: Callable[[Mapping[str, Any], Mapping[str, Any]], bool | None]) -> None:
        super().__init__()
        self.fn = fn

    def _on_step(self) -> bool:
        return self.fn(self.locals, self.globals) is not False


class EventCallback(BaseCallback):
    """A callback that triggers a child callback on some event (as SB3's)."""

    def __init__(self, callback: BaseCallback | None = None, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.callback = callback
        if callback is not None:
            callback.parent = self

    def init_callback(self, model: Any) -> None:
        super().init_callback(model)
        if self.callback is not None:
            self.callback.init_callback(model)

    def _on_event(self) -> bool:
        return self.callback.on_step() if self.callback is not None else True


class StopTrainingOnSuccessThreshold(BaseCallback):
    """Stop when the parent :class:`EvalCallback`'s last success rate reaches ``threshold``.

    Use as ``EvalCallback(..., callback_after_eval=StopTrainingOnSuccessThreshold(0.95))`` (or ``callback_on_new_best``).
    """

    def __init__(self, threshold: float, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.threshold = float(threshold)

    def _on_step(self) -> bool:
        if not isinstance(self.parent, EvalCallback):
            raise RuntimeError("StopTrainingOnSuccessThreshold must be given to an EvalCallback (callback_after_eval=...)")
        stop = self.parent.last_success_rate >= self.threshold
        if stop and self.verbose:
            print(f"Stopping training: success rate {self.parent.last_success_rate:.2f} >= {self.threshold}")
        return not stop


class StopTrainingOnRewardThreshold(BaseCallback):
    """Stop when the parent :class:`EvalCallback`'s best mean reward reaches ``reward_threshold``."""

    def __init__(self, reward_threshold: float, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.reward_threshold = float(reward_threshold)

    def _on_step(self) -> bool:
        if not isinstance(self.parent, EvalCallback):
            raise RuntimeError("StopTrainingOnRewardThreshold must be given to an EvalCallback")
        return not self.parent.best_mean_reward >= self.reward_threshold


class EvalCallback(EventCallback):
    """Evaluate the model every ``eval_freq`` steps on ``eval_env``; logs ``eval/mean_reward``, ``eval/success_rate``.

    Args:
        eval_env: a gymnasium env, vector env or env id.
        callback_on_new_best: called when the mean reward improves (e.g. a stop-on-threshold callback).
        callback_after_eval: called after every evaluation.
        best_model_save_path: where ``best_model.zip`` goes when the mean reward improves.
        log_path: where ``evaluations.npz`` (timesteps, rewards, lengths, successes) goes.

    ``eval_env`` may be an SB3 VecEnv; a ``VecNormalize`` one gets the training env's statistics before each
    evaluation, as SB3 does. Attributes, as SB3 names them: ``last_mean_reward`` and ``best_mean_reward``
    (``-inf`` before the first evaluation), ``last_success_rate``, and one entry per evaluation in
    ``evaluations_timesteps``, ``evaluations_results`` (episode returns), ``evaluations_length`` and
    ``evaluations_successes`` (``info["is_success"]`` at each episode's end).
    """

    def __init__(self, eval_env: Any, callback_on_new_best: BaseCallback | None = None,
                 callback_after_eval: BaseCallback | None = None, n_eval_episodes: int = 5, eval_freq: int = 10000,
                 log_path: str | os.PathLike | None = None, best_model_save_path: str | os.PathLike | None = None,
                 deterministic: bool = True, render: bool = False, verbose: int = 1, warn: bool = True) -> None:
        super().__init__(callback_after_eval, verbose)
        self.callback_on_new_best = callback_on_new_best
        if callback_on_new_best is not None:
            callback_on_new_best.parent = self
        from herl.training.envs import make_env

        self.eval_env = make_env(eval_env)  # an env id is made once, not at every evaluation
        self.n_eval_episodes = n_eval_episodes
        self.eval_freq = eval_freq
        self.deterministic = deterministic
        self.log_path = None if log_path is None else Path(log_path)
        self.best_model_save_path = None if best_model_save_path is None else Path(best_model_save_path)
        self.best_mean_reward = -np.inf
        self.last_mean_reward = -np.inf
        self.last_success_rate = 0.0
        self.evaluations_timesteps: list[int] = []
        self.evaluations_results: list[list[float]] = []
        self.evaluations_length: list[list[int]] = []
        self.evaluations_successes: list[list[float]] = []

    def _init_callback(self) -> None:
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.init_callback(self.model)

    def _on_step(self) -> bool:
        if self.eval_freq <= 0 or self.n_calls % self.eval_freq != 0:
            return True
        from herl.training.evaluation import evaluate_policy

        _sync_vec_normalize(self.model.get_env(), self.eval_env)
        rewards, lengths, successes = evaluate_policy(
            self.model, self.eval_env, n_eval_episodes=self.n_eval_episodes, deterministic=self.deterministic,
            return_episode_rewards=True, return_success_rate=True,
        )
        self.last_mean_reward = float(np.mean(rewards))
        self.last_success_rate = float(np.mean(successes)) if successes else 0.0
        self.evaluations_timesteps.append(self.num_timesteps)
        self.evaluations_results.append(list(rewards))
        self.evaluations_length.append(list(lengths))
        self.evaluations_successes.append(list(successes))
        if self.log_path is not None:
            self.log_path.mkdir(parents=True, exist_ok=True)
            np.savez(self.log_path / "evaluations.npz", timesteps=self.evaluations_timesteps,
                     results=self.evaluations_results, ep_lengths=self.evaluations_length,
                     successes=self.evaluations_successes)
        logger = self.model.logger
        if logger is not None:
            logger.record("eval/mean_reward", self.last_mean_reward)
            logger.record("eval/mean_ep_length", float(np.mean(lengths)))
            logger.record("eval/success_rate", self.last_success_rate)
            logger.record("time/total_timesteps", self.num_timesteps)
            logger.dump(self.num_timesteps)
        if self.verbose:
            print(f"Eval num_timesteps={self.num_timesteps}, episode_reward={self.last_mean_reward:.2f}, "
                  f"success_rate={self.last_success_rate:.2f}")
        go_on = True
        if self.last_mean_reward > self.best_mean_reward:
            self.best_mean_reward = self.last_mean_reward
            if self.best_model_save_path is not None:
                self.model.save(self.best_model_save_path / "best_model.zip")
            if self.callback_on_new_best is not None:
                go_on = self.callback_on_new_best.on_step()
        if self.callback is not None:
            go_on = self._on_event() and go_on
        return go_on


def _sync_vec_normalize(train_env: Any, eval_env: Any) -> None:
    """Give the eval env's SB3 ``VecNormalize`` the training env's statistics (SB3's ``sync_envs_normalization``)."""
    from herl.training.envs import find_vec_normalize

    source, target = find_vec_normalize(train_env), find_vec_normalize(eval_env)
    if source is None or target is None:
        return
    for name in ("obs_rms", "ret_rms"):
        if hasattr(source, name):
            setattr(target, name, copy.deepcopy(getattr(source, name)))


class CheckpointCallback(BaseCallback):
    """Save the model every ``save_freq`` calls to ``save_path/{name_prefix}_{num_timesteps}_steps.zip``.

    ``save_vecnormalize=True`` also saves the training env's SB3 ``VecNormalize`` statistics, with its own
    ``save`` (SB3's file, which ``VecNormalize.load`` reads), as ``{name_prefix}_vecnormalize_{num_timesteps}_steps.pkl``.
    """

    def __init__(self, save_freq: int, save_path: str | os.PathLike, name_prefix: str = "rl_model",
                 save_replay_buffer: bool = False, save_vecnormalize: bool = False, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.save_freq = int(save_freq)
        self.save_path = Path(save_path)
        self.name_prefix = name_prefix
        self.save_replay_buffer = save_replay_buffer
        self.save_vecnormalize = save_vecnormalize

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            path = self.save_path / f"{self.name_prefix}_{self.num_timesteps}_steps.zip"
            self.model.save(path)
            if self.save_replay_buffer:
                self.model.save_replay_buffer(self.save_path / f"{self.name_prefix}_replay_buffer_{self.num_timesteps}_steps.zip")
            vec_normalize = self.model.get_vec_normalize_env() if self.save_vecnormalize else None
            if vec_normalize is not None:
                vec_normalize.save(self.save_path / f"{self.name_prefix}_vecnormalize_{self.num_timesteps}_steps.pkl")
            if self.verbose:
                print(f"Saving model checkpoint to {path}")
        return True


def as_callback(callback: Any) -> BaseCallback:
    """None, a callback, a list of callbacks or a function ``(locals_, globals_) -> bool`` to one callback."""
    if callback is None:
        return BaseCallback()
    if isinstance(callback, BaseCallback):
        return callback
    if isinstance(callback, (list, tuple)):
        return CallbackList([as_callback(cb) for cb in callback])
    if callable(callback):
        return FunctionCallback(callback)
    raise TypeError(f"callback must be a BaseCallback, a list of them or a function, got {type(callback).__name__}")
