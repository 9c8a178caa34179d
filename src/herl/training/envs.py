"""The loop's view of the environments: ``n_envs`` of them, stepped together, reset as soon as they end.

Whatever the user passes (a gymnasium env, an env id, a gymnasium vector env), :func:`as_env_adapter`
returns an adapter whose ``step`` gives, per environment, the true next state of the transition
(for an episode that just ended, its final observation, not the reset one) and the observation to
act from next. Gymnasium 1.x vector envs autoreset in NEXT_STEP mode by default, where the step
after an episode's end returns the reset observation with a reward of 0: stored naively, that is a
transition from the final state to a start state that never happened (STYLE.md, HER pitfall 6).
We build vector envs in SAME_STEP mode, and refuse NEXT_STEP ones with the fix.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

Obs = Any  # a dict of arrays shaped (n_envs, ...) or one array (n_envs, ...)


def make_env(env: Any, n_envs: int = 1) -> gym.Env | VectorEnv:
    """An env id becomes ``gym.make(id)`` (or a SAME_STEP ``SyncVectorEnv`` when ``n_envs > 1``); envs pass through."""
    if isinstance(env, str):
        if n_envs == 1:
            return gym.make(env)
        return gym.make_vec(env, num_envs=n_envs, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    if n_envs != 1:
        raise ValueError(f"n_envs={n_envs} only applies to an env id: pass a gymnasium vector env for several envs")
    return env


def as_env_adapter(env: gym.Env | VectorEnv) -> SingleEnv | VectorEnvAdapter:
    if isinstance(env, VectorEnv):
        return VectorEnvAdapter(env)
    if isinstance(env, gym.Env):
        return SingleEnv(env)
    if hasattr(env, "env_method") and hasattr(env, "num_envs"):
        raise TypeError(
            "herl takes gymnasium envs and gymnasium vector envs, not Stable-Baselines3 VecEnvs: pass the "
            "gymnasium env itself, or gymnasium.vector.SyncVectorEnv([...], autoreset_mode=AutoresetMode.SAME_STEP)"
        )
    raise TypeError(f"expected a gymnasium Env, VectorEnv or env id, got {type(env).__name__}")


def is_goal_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and {"observation", "achieved_goal", "desired_goal"} <= set(space.spaces)


class SingleEnv:
    """One gymnasium env with a leading axis of size 1 on everything (no SyncVectorEnv copies on the hot path)."""

    n_envs = 1

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._dict_obs = isinstance(env.observation_space, gym.spaces.Dict)

    def _batch(self, obs: Any) -> Obs:
        if self._dict_obs:
            return {k: np.asarray(v)[None] for k, v in obs.items()}
        return np.asarray(obs)[None]

    def reset(self, seed: int | None = None) -> Obs:
        obs, _ = self.env.reset(seed=seed)
        return self._batch(obs)

    def step(self, actions: np.ndarray):
        """``(next_obs, obs, rewards, terminated, truncated, infos)``: ``next_obs`` ends the transition, ``obs`` starts the next one."""
        obs, reward, terminated, truncated, info = self.env.step(actions[0])
        next_obs = self._batch(obs)
        current = self._batch(self.env.reset()[0]) if terminated or truncated else next_obs
        return (next_obs, current, np.array([reward], dtype=np.float32), np.array([terminated]),
                np.array([truncated]), [info])

    def close(self) -> None:
        self.env.close()


class VectorEnvAdapter:
    """A gymnasium vector env in SAME_STEP or DISABLED autoreset mode."""

    def __init__(self, env: VectorEnv) -> None:
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if isinstance(mode, str):
            mode = AutoresetMode(mode)
        if mode == AutoresetMode.NEXT_STEP:
            raise ValueError(
                "this vector env autoresets in NEXT_STEP mode (gymnasium's default), whose step after an episode's "
                "end is a bogus transition to the reset state: create it with "
                "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (e.g. SyncVectorEnv(fns, autoreset_mode=...) "
                "or gym.make_vec(id, n, vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP}))"
            )
        self.env = env
        self.mode = mode
        self.n_envs = env.num_envs
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self._dict_obs = isinstance(self.observation_space, gym.spaces.Dict)

    def reset(self, seed: int | None = None) -> Obs:
        return self.env.reset(seed=seed)[0]

    def step(self, actions: np.ndarray):
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = actions.reshape(self.n_envs)
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        done = np.logical_or(terminated, truncated)
        env_infos = _split_infos(infos, self.n_envs)
        next_obs = obs
        if done.any():
            if self.mode == AutoresetMode.SAME_STEP:
                next_obs = _copy_obs(obs)
                final_obs, final_info = infos["final_obs"], infos.get("final_info", {})
                final_infos = _split_infos(final_info, self.n_envs)
                for i in np.flatnonzero(done):
                    _set_obs(next_obs, i, final_obs[i])
                    env_infos[i] = final_infos[i]
            else:  # DISABLED: the envs wait for us to reset those that ended
                obs = _copy_obs(obs)
                reset_obs, _ = self.env.reset(options={"reset_mask": done})
                for i in np.flatnonzero(done):
                    _set_obs(obs, i, _get_obs(reset_obs, i))
        return (next_obs, obs, np.asarray(rewards, dtype=np.float32), np.asarray(terminated, dtype=bool),
                np.asarray(truncated, dtype=bool), env_infos)

    def close(self) -> None:
        self.env.close()


def _split_infos(infos: dict[str, Any], n_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's dict of arrays (with ``_key`` masks) to one dict per env."""
    out: list[dict[str, Any]] = [{} for _ in range(n_envs)]
    for key, values in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = infos.get("_" + key)
        for i in range(n_envs):
            if mask is None or mask[i]:
                out[i][key] = _split_infos(values, n_envs)[i] if isinstance(values, dict) else values[i]
    return out


def _copy_obs(obs: Obs) -> Obs:
    return {k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()


def _get_obs(obs: Obs, i: int) -> Any:
    return {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]


def _set_obs(obs: Obs, i: int, value: Any) -> None:
    if isinstance(obs, dict):
        for k in obs:
            obs[k][i] = value[k]
    else:
        obs[i] = value
