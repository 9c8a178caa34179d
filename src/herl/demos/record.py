"""Recording expert episodes: ``generate_expert_traj`` (Stable Baselines' name) for a model or any callable."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from herl.demos.dataset import ENV_SETTINGS, Demonstrations, from_episodes, save_minari


def generate_expert_traj(model: Any, save_path: str | os.PathLike | None = None, env: Any = None, *,
                         n_episodes: int = 100, seed: int = 0, deterministic: bool = True,
                         successful_only: bool = False, max_attempts: int | None = None) -> Demonstrations:
    """Run ``model`` for ``n_episodes`` episodes of ``env`` and return them as :class:`Demonstrations`, written as
    a Minari dataset to the folder ``save_path`` when given.

    Args:
        model: a herl model (its ``predict(obs, deterministic=...)`` acts; its env is used when ``env`` is None)
            or a callable from one observation to one action (a scripted expert, a controller, a person).
        save_path: folder for the dataset (Stable Baselines wrote ``save_path.npz``; herl writes Minari's format).
            Stable Baselines' order ``(model, save_path, env)`` and ``(model, env, save_path=...)`` both work.
        env: a gymnasium env or env id.
        n_episodes: episodes to keep.
        seed: the first reset's seed (later resets continue the env's generator).
        deterministic: ``predict``'s flag for a model.
        successful_only: keep only the episodes whose last info says ``is_success`` (failed ones are dropped and
            more are run, up to ``max_attempts`` episodes, by default ``3 * n_episodes``).
    """
    if isinstance(save_path, gym.Env) and not isinstance(env, gym.Env):  # generate_expert_traj(expert, env, ...)
        save_path, env = env, save_path
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    act = _policy(model, deterministic)
    if env is None:  # the model's own env: a herl model's as given (its get_env() is a VecEnv view of it)
        env = getattr(model, "_raw_env", None) if hasattr(model, "_raw_env") else getattr(model, "get_env", lambda: None)()
    if env is None:
        raise ValueError("pass the env to record on: env=gymnasium env or id (a callable expert has none of its own)")
    own_env = isinstance(env, str)
    env = gym.make(env) if own_env else env
    if isinstance(env, gym.vector.VectorEnv):
        raise ValueError("record on a single env, not a vector env")
    episodes: list[dict[str, Any]] = []
    attempts, limit = 0, max_attempts or 3 * n_episodes
    try:
        obs, info = env.reset(seed=seed)
        while len(episodes) < n_episodes:
            if attempts >= limit:
                raise RuntimeError(f"only {len(episodes)} of {attempts} episodes succeeded; the expert fails too "
                                   f"often for successful_only (raise max_attempts, or keep failures)")
            attempts += 1
            episode = _run_episode(env, act, obs, info)
            if not successful_only or episode["success"]:
                episodes.append(episode)
            obs, info = env.reset()
    finally:
        if own_env:
            env.close()
    demos = dataclasses.replace(from_episodes(episodes, env.observation_space, env.action_space),
                                env_settings=env_settings(env))
    if save_path is not None:
        save_minari(demos, save_path, env_spec=env.spec)
    return demos


def env_settings(env: gym.Env) -> dict[str, Any]:
    """herl's wrappers around ``env`` that change what a step or an observation is (:data:`ENV_SETTINGS`), as the
    ``env.NAME`` settings of ``herl train`` name them: ``{"action_repeat": 3, "time_feature": True}``. A dataset
    keeps them in its metadata, so that training can check it runs the env the episodes were recorded in."""
    from herl.envs import ActionRepeat, TimeFeature

    settings = dict(ENV_SETTINGS)
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ActionRepeat):
            settings["action_repeat"] *= env.repeat
        elif isinstance(env, TimeFeature):
            settings["time_feature"] = True
        env = env.env
    return settings


def _policy(model: Any, deterministic: bool) -> Callable[[Any], Any]:
    if hasattr(model, "predict"):
        return lambda obs: model.predict(obs, deterministic=deterministic)[0]
    if callable(model):
        return model
    raise TypeError(f"model must be a herl model or a callable of one observation, got {type(model).__name__}")


def _run_episode(env: Any, act: Callable[[Any], Any], obs: Any, info: dict[str, Any]) -> dict[str, Any]:
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    done = False
    while not done:
        action = np.asarray(act(obs))
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(float(reward))
        terminations.append(bool(terminated))
        truncations.append(bool(truncated))
        done = terminated or truncated
    if isinstance(observations[0], dict):
        stacked: Any = {k: np.stack([o[k] for o in observations]) for k in observations[0]}
    else:
        stacked = np.stack(observations)
    success = bool(info.get("is_success", False))
    return {"observations": stacked, "actions": np.stack(actions), "rewards": rewards, "terminations": terminations,
            "truncations": truncations, "infos": {"is_success": np.array([success])} if "is_success" in info else {},
            "success": success}
