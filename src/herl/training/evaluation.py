"""Evaluating a policy over whole episodes, reporting the success rate of goal tasks."""

from __future__ import annotations

from typing import Any

import numpy as np

from herl.training.envs import as_env_adapter, make_env


def evaluate_policy(
    model: Any,
    env: Any,
    n_eval_episodes: int = 10,
    deterministic: bool = True,
    render: bool = False,
    callback: Any = None,
    reward_threshold: float | None = None,
    return_episode_rewards: bool = False,
    warn: bool = True,
    *,
    return_success_rate: bool = False,
    seed: int | None = None,
):
    """Run ``n_eval_episodes`` episodes of ``model.predict`` on ``env`` (a gymnasium env, vector env, env id or
    Stable-Baselines3 VecEnv; a ``VecNormalize``'s normalized observations are what ``predict`` sees, and the
    rewards reported are the env's own, not normalized).

    Returns ``(mean_reward, std_reward)``, or with ``return_episode_rewards`` the per-episode
    ``(rewards, lengths)``; ``return_success_rate`` appends the success rate (or the per-episode
    successes, from ``info["is_success"]`` at each episode's end). ``callback(locals_, globals_)``
    is called after every step, as in SB3. ``seed`` seeds the env's first reset; ``warn`` is
    accepted for SB3 compatibility (herl needs no Monitor wrapper, so there is nothing to warn about).
    """
    adapter = as_env_adapter(make_env(env))
    n_envs = adapter.n_envs
    # as SB3: spread episodes evenly over the envs, so short episodes do not dominate the average
    targets = np.array([(n_eval_episodes + i) // n_envs for i in range(n_envs)])
    counts = np.zeros(n_envs, dtype=int)
    returns, lengths = np.zeros(n_envs), np.zeros(n_envs, dtype=int)
    episode_rewards: list[float] = []
    episode_lengths: list[int] = []
    successes: list[float] = []
    obs = adapter.reset(seed=seed)
    while (counts < targets).any():
        actions, _ = model.predict(adapter.policy_obs(obs), deterministic=deterministic)
        _, obs, rewards, terminated, truncated, infos = adapter.step(np.asarray(actions))
        returns += rewards
        lengths += 1
        for i in np.flatnonzero(terminated | truncated):
            if counts[i] < targets[i]:
                episode_rewards.append(float(returns[i]))
                episode_lengths.append(int(lengths[i]))
                if "is_success" in infos[i]:
                    successes.append(float(infos[i]["is_success"]))
                counts[i] += 1
            returns[i], lengths[i] = 0.0, 0
        if callback is not None:
            callback(locals(), globals())
        if render:
            getattr(adapter.env, "render", lambda: None)()
    mean_reward, std_reward = float(np.mean(episode_rewards)), float(np.std(episode_rewards))
    if reward_threshold is not None and mean_reward < reward_threshold:
        raise AssertionError(f"mean reward {mean_reward:.2f} is below the threshold {reward_threshold:.2f}")
    if return_episode_rewards:
        out = (episode_rewards, episode_lengths)
        return (*out, successes) if return_success_rate else out
    if return_success_rate:
        return mean_reward, std_reward, float(np.mean(successes)) if successes else float("nan")
    return mean_reward, std_reward
