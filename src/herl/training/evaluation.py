"""Evaluating a policy over whole episodes, reporting the success rate of goal tasks."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from herl.training.envs import as_env_adapter, make_env


LONG_EPISODE_STEPS = 100_000
"""After how many steps of one episode :func:`evaluate_policy` warns that the env may have no time limit (it goes on,
as SB3's does: an episode that never ends holds it forever)."""


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
    is called after every step for each env whose episodes still count, as in SB3, with SB3's names among the
    locals (``i``, ``done``, ``info``, ``reward``, ``episode_starts``, ``episode_counts``, ``current_rewards``, ...). ``seed`` seeds the env's first reset; ``warn`` is
    accepted for SB3 compatibility (herl needs no Monitor wrapper, so there is nothing to warn about).
    """
    adapter = as_env_adapter(make_env(env))
    n_envs = adapter.n_envs
    # as SB3: spread episodes evenly over the envs, so short episodes do not dominate the average
    episode_count_targets = np.array([(n_eval_episodes + i) // n_envs for i in range(n_envs)])
    episode_counts = np.zeros(n_envs, dtype=int)
    current_rewards, current_lengths = np.zeros(n_envs), np.zeros(n_envs, dtype=int)
    episode_rewards: list[float] = []
    episode_lengths: list[int] = []
    successes: list[float] = []
    episode_starts = np.ones(n_envs, dtype=bool)
    observations = adapter.reset(seed=seed)
    long_episode_said = False
    while (episode_counts < episode_count_targets).any():
        actions, states = model.predict(adapter.policy_obs(observations), deterministic=deterministic)
        _, new_observations, rewards, terminated, truncated, infos = adapter.step(np.asarray(actions))
        dones = terminated | truncated
        current_rewards += rewards
        current_lengths += 1
        for i in range(n_envs):
            if episode_counts[i] < episode_count_targets[i]:
                # SB3's names, for callbacks written for its evaluate_policy (EvalCallback's success log reads
                # locals_["done"] and locals_["info"]): one call per env that still counts, after each step
                reward, done, info = float(rewards[i]), bool(dones[i]), infos[i]
                episode_starts[i] = done
                if callback is not None:
                    callback(locals(), globals())
                if done:
                    episode_rewards.append(float(current_rewards[i]))
                    episode_lengths.append(int(current_lengths[i]))
                    if "is_success" in info:
                        successes.append(float(info["is_success"]))
                    episode_counts[i] += 1
            if dones[i]:
                current_rewards[i], current_lengths[i] = 0.0, 0
        observations = new_observations
        if not long_episode_said and int(current_lengths.max()) >= LONG_EPISODE_STEPS:
            long_episode_said = True
            warnings.warn(f"evaluate_policy: an episode has run {LONG_EPISODE_STEPS:,} steps without ending, and "
                          "evaluation waits for it to end: if the env has no time limit, give it one "
                          "(gymnasium.wrappers.TimeLimit, or max_episode_steps= where it is registered)", RuntimeWarning,
                          stacklevel=2)
        if render:
            getattr(adapter.env, "render", lambda: None)()
    mean_reward, std_reward = float(np.mean(episode_rewards)), float(np.std(episode_rewards))
    if reward_threshold is not None and mean_reward < reward_threshold:
        raise AssertionError(f"mean reward {mean_reward:.2f} is below the threshold {reward_threshold:.2f}")
    if return_episode_rewards:
        out = (episode_rewards, episode_lengths)
        return (*out, successes) if return_success_rate else out
    if return_success_rate and not successes:
        warnings.warn("evaluate_policy: return_success_rate, but no episode's last info held 'is_success': the "
                      "success rate is nan (an env reports success as info['is_success'], as gymnasium-robotics' do)",
                      RuntimeWarning, stacklevel=2)
    if return_success_rate:
        return mean_reward, std_reward, float(np.mean(successes)) if successes else float("nan")
    return mean_reward, std_reward
