"""The off-policy loop: the one place that steps environments, for every algorithm.

Collect ``train_freq`` steps (or episodes) with the model's exploration, store them, then run
``gradient_steps`` updates, until ``total_timesteps`` env steps. Episode statistics, logging and
callbacks live here too; the algorithm only acts and updates.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from herl.buffers.replay import TRUNCATION_NOTE, TRUNCATION_RISK_NOTE
from herl.errors import NonFiniteError
from herl.training.callbacks import CallbackList, ProgressBarCallback, as_callback
from herl.training.diagnostics import replay_diagnostics
from herl.training.logger import Logger, configure


def run(model: Any, total_timesteps: int, *, callback: Any, log_interval: int | None, tb_log_name: str,
        reset_num_timesteps: bool, progress_bar: bool) -> Any:
    env, buffer, config = model.env, model.replay_buffer, model.config
    callback, state, start = begin(model, total_timesteps, callback=callback, log_interval=log_interval,
                                   tb_log_name=tb_log_name, reset_num_timesteps=reset_num_timesteps,
                                   progress_bar=progress_bar)
    total_timesteps = state["total_timesteps"]

    n_freq, unit = config.train_freq
    per_step = unit == "step"
    noise = model.action_noise
    obs = model._last_obs
    returns, lengths = model._ep_returns, model._ep_lengths
    guard = getattr(buffer, "check_finite", True)  # check_finite=False turns the NaN guard off, this part too
    go_on = True
    while go_on and model.num_timesteps < total_timesteps:
        callback.on_rollout_start()
        steps = episodes = 0
        while (steps if per_step else episodes) < n_freq and model.num_timesteps < total_timesteps:
            if env.stepped_outside:  # a callback reset or stepped the env through model.get_env(): obs are stale
                model._last_obs = obs
                restart_envs(model, stacklevel=4)
                obs, returns, lengths = model._last_obs, model._ep_returns, model._ep_lengths
            actions = model._collect_actions(env.policy_obs(obs))  # an SB3 VecNormalize's statistics apply here
            if guard and actions.dtype.kind == "f" and not math.isfinite(np.add.reduce(actions, None)):
                stop_on_non_finite_action(model, obs, actions)  # before the env is stepped with it
            env_actions = model._unscale(actions)
            next_obs, new_obs, rewards, terminated, truncated, infos = env.step(env_actions)
            try:
                buffer.add(obs, next_obs, actions, rewards, infos=infos, terminated=terminated, truncated=truncated)
            except NonFiniteError as err:
                raise NonFiniteError(f"training stopped at env step {model.num_timesteps}: {err}") from None
            model.num_timesteps += env.n_envs
            steps += 1
            returns += rewards
            lengths += 1
            dones = terminated | truncated
            if dones.any():
                for i in np.flatnonzero(dones):
                    end_episode(model, float(returns[i]), int(lengths[i]), infos[i], log_interval, start)
                    returns[i], lengths[i] = 0.0, 0
                    episodes += 1
                    if noise is not None:
                        _reset_noise(noise, i)
            obs = new_obs
            state.update(new_obs=new_obs, rewards=rewards, dones=dones, infos=infos, actions=env_actions,
                         buffer_actions=actions, num_collected_steps=steps, num_collected_episodes=episodes)
            if not callback.on_step():
                go_on = False
                break
        model._last_obs = obs
        model._current_progress_remaining = 1.0 - model.num_timesteps / max(total_timesteps, 1)
        callback.on_rollout_end()
        if go_on and model.num_timesteps > config.learning_starts:
            # -1: one update per transition collected, counting every env's (as SB3)
            gradient_steps = config.gradient_steps if config.gradient_steps >= 0 else steps * env.n_envs
            if gradient_steps > 0:
                model.train(gradient_steps)
    callback.on_training_end()
    return model


def begin(model: Any, total_timesteps: int, *, callback: Any, log_interval: int | None, tb_log_name: str,
          reset_num_timesteps: bool, progress_bar: bool = False) -> tuple[Any, dict[str, Any], tuple[int, float]]:
    """What every ``learn`` does before collecting: reset the envs (or go on from the last call), the counters, the
    logger and the callback. Returns the callback, the state its ``locals`` view shows (``total_timesteps`` there is
    the step to stop at) and ``(start step, start time)`` for ``time/fps``. Also used by the learner of
    :mod:`herl.distributed`, which collects on Ray actors."""
    if reset_num_timesteps or model._last_obs is None or model.env.stepped_outside:
        restart_envs(model, new_learn=reset_num_timesteps)
    if reset_num_timesteps:
        model.ep_info_buffer.clear()
        model.ep_success_buffer.clear()
        model.num_timesteps = 0
        model._episode_num = 0
    else:
        total_timesteps += model.num_timesteps
    model._total_timesteps = total_timesteps
    start = model._log_start = (model.num_timesteps, time.perf_counter())
    if not model._custom_logger:
        model.logger = _default_logger(model, tb_log_name, reset_num_timesteps)

    callback = as_callback(callback)
    if progress_bar:  # as SB3: the bar is a callback
        callback = CallbackList([callback, ProgressBarCallback()])
    callback.init_callback(model)
    # Callbacks see this read-only view, refreshed in place each step (STYLE.md: no access to the loop's locals),
    # with the names SB3's learn and collect_rollouts give them, so SB3's callbacks find what they read.
    state: dict[str, Any] = {
        "total_timesteps": total_timesteps, "callback": callback, "log_interval": log_interval,
        "tb_log_name": tb_log_name, "reset_num_timesteps": reset_num_timesteps, "progress_bar": progress_bar,
        "self": model, "env": model.get_env(), "replay_buffer": model.replay_buffer,
        "action_noise": model.action_noise, "learning_starts": model.config.learning_starts,
        "train_freq": model.config.train_freq, "num_collected_steps": 0, "num_collected_episodes": 0,
    }
    state_view = MappingProxyType(state)
    callback.on_training_start(state_view, MappingProxyType({}))
    callback.update_locals(state_view)
    return callback, state, start


def stop_on_non_finite_action(model: Any, obs: Any, actions: np.ndarray) -> None:
    """Raise :class:`NonFiniteError` if the policy's ``actions`` (one row per env) hold NaN or infinity, saying why:
    the observation it acted on (an env's fault), or else a diverged policy. Checked before the env is stepped: a NaN
    action made the env's next observation NaN too, and the guard on the buffer then blamed the env."""
    bad = ~np.isfinite(actions.reshape(len(actions), -1)).all(axis=1)
    if not bad.any():  # a sum of finite values that overflowed
        return
    env_index = int(np.flatnonzero(bad)[0])
    step = model.num_timesteps
    for key, value in (obs.items() if isinstance(obs, Mapping) else [(None, obs)]):
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value[env_index]).all():
            name = "obs" if key is None else f"obs[{key!r}]"
            raise NonFiniteError(
                f"training stopped at env step {step}: {name} of env {env_index} holds NaN or infinity (an episode's "
                "first observation, from the env's reset), and so does the action the policy chose from it; nothing "
                "of this step was stored. Find where the env produces it (herl check-env ID runs it with random "
                "actions); wrap the env to clean its outputs")
    try:
        model.check_losses()  # a loss that became NaN says more about why
        why = (f"its weights are no longer finite after update {model._n_updates} (the losses were still finite), the "
               f"usual sign of a learning_rate ({model.config.learning_rate:g}) far too high for the rewards' scale. "
               "Lower learning_rate, normalize the rewards, or use clip_target=True for -1/0 goal rewards, and continue "
               "from a checkpoint taken before this step.")
    except NonFiniteError as err:
        why = str(err)
    raise NonFiniteError(
        f"training stopped at env step {step}: the policy's action of env {env_index} holds NaN or infinity, chosen "
        f"from a finite observation: the policy diverged: {why} The env was not stepped with this action; nothing of "
        "this step was stored.")


def restart_envs(model: Any, new_learn: bool = False, stacklevel: int = 5) -> None:
    """Reset every env and zero the running episodes' returns and lengths; ``model._last_obs`` are then the
    observations to act from. Episodes running in the buffer end here: they are closed as truncated, so that HER
    never draws a future goal across the reset.

    With a memory-saving buffer, as SB3: a warning when running episodes are cut, and at every ``learn`` that resets
    (``new_learn``) after another, since that call pattern cuts whatever episode runs (SB3's tests expect it);
    ``stacklevel`` points it at the user's ``learn`` line."""
    env, buffer = model.env, model.replay_buffer
    if buffer is not None:  # whatever still runs in the buffer (a loaded one's too) ends with the reset
        closed = buffer.truncate_last_trajectory(warn=False)
        if buffer.optimize_memory_usage and model._last_obs is not None and (closed or new_learn):
            warnings.warn(TRUNCATION_NOTE if closed else TRUNCATION_RISK_NOTE, UserWarning, stacklevel=stacklevel)
    seed = None if model._env_was_seeded else model._first_reset_seed()
    model._last_obs = env.reset(seed=seed)
    model._env_was_seeded = True
    env.stepped_outside = False
    model._ep_returns = np.zeros(env.n_envs)
    model._ep_lengths = np.zeros(env.n_envs, dtype=np.int64)


def end_episode(model: Any, episode_return: float, length: int, info: dict[str, Any], log_interval: int | None,
                start: tuple[int, float]) -> None:
    """Count an ended episode in the rollout statistics, and log them every ``log_interval`` episodes."""
    model.ep_info_buffer.append({"r": episode_return, "l": length})
    success = info.get("is_success")
    if success is not None:
        model.ep_success_buffer.append(float(success))
    model._episode_num += 1
    if log_interval and model._episode_num % log_interval == 0:
        dump_logs(model, *start)


def _reset_noise(noise: Any, env_index: int) -> None:
    """Restart the noise of the env whose episode ended (an SB3-style noise with ``reset()`` restarts whole)."""
    try:
        noise.reset([env_index])
    except TypeError:
        noise.reset()


def _default_logger(model: Any, tb_log_name: str, reset_num_timesteps: bool) -> Logger:
    formats = ["stdout"] if model.verbose >= 1 else []
    folder = None
    if model.tensorboard_log is not None:
        root = Path(model.tensorboard_log)
        runs = [int(p.name.rsplit("_", 1)[1]) for p in root.glob(f"{tb_log_name}_*") if p.name.rsplit("_", 1)[1].isdigit()]
        run_id = max(runs, default=0) + (1 if reset_num_timesteps or not runs else 0)
        folder = root / f"{tb_log_name}_{run_id}"
        formats.append("tensorboard")
    if model.logger is not None and not reset_num_timesteps:
        return model.logger
    return configure(folder, formats)


def dump_logs(model: Any, start_timesteps: int, start_time: float) -> None:
    """Record the rollout, training and time statistics and write them (``time/fps`` counts from the given start)."""
    logger = model.logger
    elapsed = max(time.perf_counter() - start_time, 1e-9)
    logger.record("time/episodes", model._episode_num)
    logger.record("time/fps", int((model.num_timesteps - start_timesteps) / elapsed))
    logger.record("time/time_elapsed", int(elapsed))
    logger.record("time/total_timesteps", model.num_timesteps)
    if model.ep_info_buffer:
        logger.record("rollout/ep_rew_mean", float(np.mean([e["r"] for e in model.ep_info_buffer])))
        logger.record("rollout/ep_len_mean", float(np.mean([e["l"] for e in model.ep_info_buffer])))
    if model.ep_success_buffer:
        logger.record("rollout/success_rate", float(np.mean(model.ep_success_buffer)))
    for key, value in model.train_info().items():
        logger.record(key, value)
    for key, value in replay_diagnostics(model).items():
        logger.record(key, value)
    logger.record("train/n_updates", model._n_updates)
    logger.record("train/learning_rate", model.config.learning_rate)
    logger.dump(model.num_timesteps)
