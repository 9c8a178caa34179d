"""The loop's view of the environments: ``n_envs`` of them, stepped together, reset as soon as they end.

Whatever the user passes (a gymnasium env, an env id, a gymnasium vector env), :func:`as_env_adapter`
returns an adapter whose ``step`` gives, per environment, the true next state of the transition
(for an episode that just ended, its final observation, not the reset one) and the observation to
act from next. Gymnasium 1.x vector envs autoreset in NEXT_STEP mode by default, where the step
after an episode's end returns the reset observation with a reward of 0: stored naively, that is a
transition from the final state to a start state that never happened (STYLE.md, HER pitfall 6).
We build vector envs in SAME_STEP mode, and refuse NEXT_STEP ones with the fix.

Stable-Baselines3 VecEnvs (``DummyVecEnv``, ``SubprocVecEnv``, ``make_vec_env``, ``VecNormalize``) are
recognized by their interface, without importing SB3: they reset an ended env at once and hand its
final observation in ``infos[i]["terminal_observation"]``, as SAME_STEP does.
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


SB3_VEC_ENV_METHODS = ("reset", "step_async", "step_wait", "env_method", "get_attr", "num_envs")


def is_sb3_vec_env(env: Any) -> bool:
    """Whether ``env`` has Stable-Baselines3's VecEnv interface (checked by duck typing: herl never imports SB3)."""
    return not isinstance(env, (gym.Env, VectorEnv)) and all(hasattr(env, name) for name in SB3_VEC_ENV_METHODS)


def find_vec_normalize(env: Any) -> Any:
    """The SB3 ``VecNormalize`` in ``env``'s chain of VecEnv wrappers (``.venv``), or None."""
    while env is not None:
        if all(hasattr(type(env), name) for name in ("normalize_obs", "get_original_obs", "get_original_reward")):
            return env
        env = env.__dict__.get("venv") if hasattr(env, "__dict__") else None
    return None


def as_env_adapter(env: Any) -> SingleEnv | VectorEnvAdapter | SB3VecEnvAdapter:
    if isinstance(env, VectorEnv):
        return VectorEnvAdapter(env)
    if isinstance(env, gym.Env):
        return SingleEnv(env)
    if is_sb3_vec_env(env):
        return SB3VecEnvAdapter(env)
    raise TypeError(
        f"expected a gymnasium Env, a gymnasium VectorEnv, a Stable-Baselines3 VecEnv or an env id, got "
        f"{type(env).__name__}"
    )


def is_goal_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and {"observation", "achieved_goal", "desired_goal"} <= set(space.spaces)


class EnvAdapter:
    """What the loop and ``evaluate_policy`` use: ``n_envs``, spaces, ``reset``, ``step`` and :meth:`policy_obs`."""

    n_envs: int
    env: Any
    normalizer: Any = None  # an SB3 VecNormalize whose statistics the policy's inputs go through

    def policy_obs(self, obs: Obs) -> Obs:
        """Observations as the policy sees them: stored observations are the env's own, a VecNormalize's
        normalized ones are what ``predict`` gets from a VecNormalize env (as in SB3)."""
        return obs if self.normalizer is None else self.normalizer.normalize_obs(obs)

    def close(self) -> None:
        self.env.close()


class SingleEnv(EnvAdapter):
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


class VectorEnvAdapter(EnvAdapter):
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


class SB3VecEnvAdapter(EnvAdapter):
    """A Stable-Baselines3 VecEnv: ``DummyVecEnv``, ``SubprocVecEnv``, ``make_vec_env``'s, wrapped or not.

    ``done`` splits into truncation (``infos[i]["TimeLimit.truncated"]``) and termination; an ended
    env's true next state is ``infos[i]["terminal_observation"]``. With a ``VecNormalize`` in the
    chain, SB3's off-policy algorithms store the original observations and rewards (HER recomputes
    rewards from original goals) and normalize at sampling and acting time: so does herl, through
    :attr:`normalizer`.
    """

    def __init__(self, venv: Any) -> None:
        self.env = venv
        self.n_envs = int(venv.num_envs)
        self.observation_space = venv.observation_space
        self.action_space = venv.action_space
        self.normalizer = find_vec_normalize(venv)

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self.env.seed(seed)  # SB3: the seed of the next reset
        obs = self.env.reset()
        return obs if self.normalizer is None else self.normalizer.get_original_obs()

    def step(self, actions: np.ndarray):
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = actions.reshape(self.n_envs)
        obs, rewards, dones, infos = self.env.step(actions)
        if self.normalizer is not None:
            obs, rewards = self.normalizer.get_original_obs(), self.normalizer.get_original_reward()
        dones = np.asarray(dones, dtype=bool)
        truncated = np.zeros(self.n_envs, dtype=bool)
        next_obs = obs
        if dones.any():
            next_obs = _copy_obs(obs)
            for i in np.flatnonzero(dones):
                truncated[i] = bool(infos[i].get("TimeLimit.truncated", False))
                final = infos[i]["terminal_observation"]
                if self.normalizer is not None:  # VecNormalize hands it normalized
                    final = self.normalizer.unnormalize_obs(final)
                _set_obs(next_obs, i, final)
        return (next_obs, obs, np.asarray(rewards, dtype=np.float32), dones & ~truncated, truncated, list(infos))


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
