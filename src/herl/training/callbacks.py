"""Callbacks with Stable-Baselines3's hook names and attributes, so callbacks written for SB3 keep working.

A callback sees ``model``, ``num_timesteps``, ``n_calls``, ``logger``, ``training_env`` (``model.get_env()``,
a VecEnv as in SB3) and ``locals``: a read-only view of the training state at the current step, with the
names SB3's ``learn`` and ``collect_rollouts`` use (``new_obs``, ``rewards``, ``dones``, ``infos``,
``actions`` as the env got them, ``buffer_actions`` in the policy's [-1, 1] scale, ``num_collected_steps``,
``num_collected_episodes``, ``total_timesteps``, ``tb_log_name``, ``callback``, ``env``, ``self`` ...),
not the loop's own variables.

``learn(callback=...)`` takes a herl callback, a list of them, a plain function
``callback(locals_, globals_) -> bool`` (Stable-Baselines 2's form), or a callback object herl did not
define, such as Stable-Baselines3's own classes: anything with ``init_callback``, ``on_training_start``
and ``on_step`` is driven as SB3 drives it (:class:`ForeignCallback`).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from herl.io.atomic import atomic_file


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

    def __init__(self, callbacks: Sequence[Any]) -> None:
        super().__init__()
        self.callbacks = [as_callback(cb) for cb in callbacks]  # SB3's objects and functions too

    def _init_callback(self) -> None:
        for cb in self.callbacks:
            cb.init_callback(self.model)
            if self.parent is not None:  # a list given to an EvalCallback: its members read that one (SB3 #1791)
                cb.parent = self.parent

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

    def __init__(self, fn: Callable[[Mapping[str, Any], Mapping[str, Any]], bool | None] | None,
                 verbose: int = 0) -> None:
        super().__init__(verbose)
        self.fn = fn

    def _on_step(self) -> bool:
        return self.fn is None or self.fn(self.locals, self.globals) is not False


class ConvertCallback(FunctionCallback):
    """SB3's name for a function turned into a callback: ``ConvertCallback(fn)`` calls ``fn(locals_, globals_)``
    after every step; False stops training. Unlike SB3, a function that returns None lets training go on (as
    Stable-Baselines 2 did), and ``fn=None`` does nothing."""

    @property
    def callback(self) -> Any:
        """The function (SB3's attribute name)."""
        return self.fn


class EventCallback(BaseCallback):
    """A callback that triggers a child callback on some event (as SB3's)."""

    def __init__(self, callback: Any = None, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.callback = None if callback is None else as_callback(callback)
        if self.callback is not None:
            self.callback.parent = self

    def init_callback(self, model: Any) -> None:
        super().init_callback(model)
        if self.callback is not None:
            self.callback.init_callback(model)

    def _on_training_start(self) -> None:
        if self.callback is not None:
            self.callback.on_training_start(self.locals, self.globals)

    def _on_event(self) -> bool:
        return self.callback.on_step() if self.callback is not None else True

    def update_child_locals(self, locals_: Mapping[str, Any]) -> None:
        if self.callback is not None:
            self.callback.update_locals(locals_)


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
        best = _parent_best_mean_reward(self)
        stop = best >= self.reward_threshold
        if stop and self.verbose:
            print(f"Stopping training: the best mean reward {best:.2f} reached the threshold {self.reward_threshold}")
        return not stop


def _parent_best_mean_reward(callback: BaseCallback) -> float:
    """The best mean reward of the EvalCallback (herl's or SB3's) that ``callback`` was given to."""
    parent = callback.parent
    if parent is None or not hasattr(parent, "best_mean_reward"):
        raise RuntimeError(f"{type(callback).__name__} reads the evaluations of an EvalCallback: give it to one, "
                           f"EvalCallback(eval_env, callback_after_eval={type(callback).__name__}(...))")
    return float(parent.best_mean_reward)


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

    def __init__(self, eval_env: Any, callback_on_new_best: Any = None,
                 callback_after_eval: Any = None, n_eval_episodes: int = 5, eval_freq: int = 10000,
                 log_path: str | os.PathLike | None = None, best_model_save_path: str | os.PathLike | None = None,
                 deterministic: bool = True, render: bool = False, verbose: int = 1, warn: bool = True) -> None:
        super().__init__(callback_after_eval, verbose)
        self.callback_on_new_best = None if callback_on_new_best is None else as_callback(callback_on_new_best)
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.parent = self
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
        self._is_success_buffer: list[bool] = []

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
        self._is_success_buffer = [bool(s) for s in successes]  # SB3's name for the last evaluation's successes
        if self.log_path is not None:
            self.log_path.mkdir(parents=True, exist_ok=True)
            with atomic_file(self.log_path / "evaluations.npz") as f:  # rewritten whole at each evaluation
                np.savez(f, timesteps=self.evaluations_timesteps, results=self.evaluations_results,
                         ep_lengths=self.evaluations_length, successes=self.evaluations_successes)
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


class StopTrainingOnNoModelImprovement(BaseCallback):
    """Stop when ``max_no_improvement_evals`` evaluations in a row bring no new best mean reward, counting only after
    the first ``min_evals`` evaluations. Give it to an ``EvalCallback`` as ``callback_after_eval``."""

    def __init__(self, max_no_improvement_evals: int, min_evals: int = 0, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.max_no_improvement_evals = int(max_no_improvement_evals)
        self.min_evals = int(min_evals)
        self.last_best_mean_reward = -np.inf
        self.no_improvement_evals = 0

    def _on_step(self) -> bool:
        best = _parent_best_mean_reward(self)
        go_on = True
        if self.n_calls > self.min_evals:  # n_calls counts the evaluations: this runs after each one
            if best > self.last_best_mean_reward:
                self.no_improvement_evals = 0
            else:
                self.no_improvement_evals += 1
                go_on = self.no_improvement_evals <= self.max_no_improvement_evals
        self.last_best_mean_reward = best
        if not go_on and self.verbose:
            print(f"Stopping training: no new best model in the last {self.no_improvement_evals} evaluations")
        return go_on


class StopTrainingOnMaxEpisodes(BaseCallback):
    """Stop once ``max_episodes`` episodes per env have ended: ``max_episodes * num_envs`` in all, counted over every
    env (as SB3: with 4 envs and ``max_episodes=10``, training stops at the 40th episode, wherever it ended)."""

    def __init__(self, max_episodes: int, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.max_episodes = int(max_episodes)
        self._total_max_episodes = self.max_episodes
        self.n_episodes = 0

    def _init_callback(self) -> None:
        self._total_max_episodes = self.max_episodes * self.training_env.num_envs

    def _on_step(self) -> bool:
        if "dones" not in self.locals:
            raise RuntimeError("StopTrainingOnMaxEpisodes counts the ended episodes in locals['dones'], which this "
                               "training loop does not give: use it as learn's callback")
        self.n_episodes += int(np.sum(self.locals["dones"]))
        go_on = self.n_episodes < self._total_max_episodes
        if not go_on and self.verbose:
            n_envs = self.training_env.num_envs
            per_env = f", {self.n_episodes / n_envs:.2f} per env" if n_envs > 1 else ""
            print(f"Stopping training at {self.num_timesteps} steps: {self.n_episodes} episodes played{per_env} "
                  f"(max_episodes={self.max_episodes})")
        return go_on


class EveryNTimesteps(EventCallback):
    """Trigger ``callback`` once at least ``n_steps`` env steps (counting every env's) have passed since it last
    fired."""

    def __init__(self, n_steps: int, callback: Any) -> None:
        super().__init__(callback)
        self.n_steps = int(n_steps)
        self.last_time_trigger = 0

    def _on_step(self) -> bool:
        if self.num_timesteps - self.last_time_trigger >= self.n_steps:
            self.last_time_trigger = self.num_timesteps
            return self._on_event()
        return True


class LogEveryNTimesteps(EveryNTimesteps):
    """Write the logs (rollout, training and time statistics) every ``n_steps`` env steps, whatever the episodes'
    ``log_interval``."""

    def __init__(self, n_steps: int) -> None:
        super().__init__(n_steps, ConvertCallback(self._log_data))
        self._start = (0, 0.0)

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._start = (self.model.num_timesteps, time.perf_counter())  # time/fps counts from here

    def _log_data(self, locals_: Mapping[str, Any], globals_: Mapping[str, Any]) -> bool:
        dump = getattr(self.model, "dump_logs", None)
        if dump is not None:  # a model with SB3's own method
            dump()
        else:
            from herl.training.loop import dump_logs

            dump_logs(self.model, *self._start)
        return True


class ProgressBarCallback(BaseCallback):
    """A tqdm progress bar of the env steps left (what ``learn(progress_bar=True)`` adds)."""

    def __init__(self) -> None:
        super().__init__()
        try:
            from tqdm import tqdm
        except ImportError as err:
            raise ImportError("the progress bar needs tqdm: pip install tqdm") from err
        self._tqdm = tqdm
        self.pbar: Any = None
        self._last = 0

    def _on_training_start(self) -> None:
        self._last = self.model.num_timesteps  # steps of earlier learn calls are not this bar's
        self.pbar = self._tqdm(total=self.locals["total_timesteps"] - self._last, unit="steps")

    def _on_step(self) -> bool:
        # the steps since the last call: num_envs per env step in herl's loop, an episode's with workers
        self.pbar.update(self.num_timesteps - self._last)
        self._last = self.num_timesteps
        return True

    def _on_training_end(self) -> None:
        if self.pbar is not None:
            self.pbar.refresh()
            self.pbar.close()


FOREIGN_HOOKS = ("init_callback", "on_training_start", "on_step")
"""What an object needs for :func:`as_callback` to take it as a callback it did not define (SB3's have all of them)."""


def is_callback_object(obj: Any) -> bool:
    return not isinstance(obj, type) and all(callable(getattr(obj, name, None)) for name in FOREIGN_HOOKS)


class ForeignCallback(BaseCallback):
    """A callback object herl did not define, Stable-Baselines3's own classes (``CheckpointCallback``,
    ``EvalCallback``, ``StopTrainingOnMaxEpisodes``, its ``CallbackList`` ...) or a subclass of them, driven through
    its public hooks as SB3's ``learn`` drives it.

    SB3's callbacks keep the dict their ``on_training_start`` gets and update it in place (``update_locals``) before
    each ``on_step``: they get a dict of their own, refreshed from herl's read-only view at every step. What they
    read from the model is there under SB3's names: ``get_env()`` (a VecEnv), ``num_timesteps``, ``logger``
    (``record``/``dump``), ``save``, ``save_replay_buffer``, ``get_vec_normalize_env``, ``predict``.
    """

    def __init__(self, callback: Any) -> None:
        self.callback = callback  # before BaseCallback sets parent, which goes to it
        super().__init__(getattr(callback, "verbose", 0))

    @property
    def parent(self) -> Any:
        return getattr(self.callback, "parent", None)

    @parent.setter
    def parent(self, value: Any) -> None:
        if value is not None:  # e.g. the EvalCallback whose best_mean_reward SB3's StopTrainingOn... callbacks read
            self.callback.parent = value

    def init_callback(self, model: Any) -> None:
        self.model = model
        self.callback.init_callback(model)

    def on_training_start(self, locals_: Mapping[str, Any], globals_: Mapping[str, Any]) -> None:
        self.locals, self.globals = locals_, globals_
        self.num_timesteps = self.model.num_timesteps
        self.callback.on_training_start(dict(locals_), dict(globals_))

    def on_rollout_start(self) -> None:
        self._call("on_rollout_start")

    def on_step(self) -> bool:
        self.n_calls += 1
        self.num_timesteps = self.model.num_timesteps
        self._call("update_locals", self.locals)
        return self.callback.on_step()

    def on_rollout_end(self) -> None:
        self._call("on_rollout_end")

    def on_training_end(self) -> None:
        self._call("on_training_end")

    def update_locals(self, locals_: Mapping[str, Any]) -> None:
        self.locals = locals_  # handed on before each on_step

    def _call(self, hook: str, *args: Any) -> None:
        method = getattr(self.callback, hook, None)
        if method is not None:
            method(*args)


def as_callback(callback: Any) -> BaseCallback:
    """None, a callback (herl's, or an object with SB3's hooks), a list of them or a function
    ``(locals_, globals_) -> bool`` to one herl callback."""
    if callback is None:
        return BaseCallback()
    if isinstance(callback, BaseCallback):
        return callback
    if isinstance(callback, (list, tuple)):
        return CallbackList(callback)
    if is_callback_object(callback):
        return ForeignCallback(callback)
    if callable(callback) and not isinstance(callback, type):
        return FunctionCallback(callback)
    hint = " (a class: pass an instance of it)" if isinstance(callback, type) else ""
    raise TypeError(
        f"callback must be None, a callback (herl's BaseCallback, or an object with {', '.join(FOREIGN_HOOKS)} such as "
        f"Stable-Baselines3's callbacks), a list of them, or a function (locals_, globals_) -> bool; got "
        f"{type(callback).__name__}{hint}"
    )
