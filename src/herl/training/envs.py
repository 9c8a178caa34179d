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

:class:`VecEnv` goes the other way: SB3's VecEnv interface over any of these, which ``model.get_env()``
returns, so that code written for SB3 (its README's ``vec_env = model.get_env()`` loop, its callbacks)
runs on a herl model.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
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
    if isinstance(env, type) and issubclass(env, gym.Env):
        raise TypeError(f"got the env class {env.__name__}, not an env: pass an env object, {env.__name__}(...), or an "
                        "env id")
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
    stepped_outside = False
    """True once the :class:`VecEnv` of :meth:`vec_env` has reset or stepped the env: the training loop's observations
    are stale then, and it resets the env before it steps it again (``loop.restart_envs``), which clears this."""
    _vec_env: VecEnv | None = None

    def reset(self, seed: int | None = None) -> Obs:
        return self.reset_with_infos(seed)[0]

    def reset_with_infos(self, seed: int | None = None) -> tuple[Obs, list[dict[str, Any]]]:
        raise NotImplementedError

    def vec_env(self) -> Any:
        """This env as a Stable-Baselines3 VecEnv: a :class:`VecEnv` view, made once (``model.get_env()``)."""
        if self._vec_env is None:
            self._vec_env = VecEnv(self)
        return self._vec_env

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

    def reset_with_infos(self, seed: int | None = None) -> tuple[Obs, list[dict[str, Any]]]:
        obs, info = self.env.reset(seed=seed)
        return self._batch(obs), [info]

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

    def reset_with_infos(self, seed: int | None = None) -> tuple[Obs, list[dict[str, Any]]]:
        obs, infos = self.env.reset(seed=seed)
        return obs, _split_infos(infos, self.n_envs)

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

    def reset_with_infos(self, seed: int | None = None) -> tuple[Obs, list[dict[str, Any]]]:
        if seed is not None:
            self.env.seed(seed)  # SB3: the seed of the next reset
        obs = self.env.reset()
        infos = list(getattr(self.env, "reset_infos", None) or [{} for _ in range(self.n_envs)])
        return (obs if self.normalizer is None else self.normalizer.get_original_obs()), infos

    def vec_env(self) -> Any:
        """The user's own VecEnv, as SB3 returns it. herl cannot see it stepped from outside (it has no hook there):
        after stepping it yourself, learn with ``reset_num_timesteps=True`` (the default), which resets it."""
        return self.env

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


Indices = None | int | Sequence[int]


class VecEnv:
    """Stable-Baselines3's VecEnv interface over a gymnasium env, a gymnasium vector env (SAME_STEP or DISABLED
    autoreset) or any env :func:`as_env_adapter` takes; ``model.get_env()`` returns one (the same object until
    ``set_env``), so SB3's loop runs unchanged::

        vec_env = model.get_env()
        obs = vec_env.reset()
        for _ in range(1000):
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, done, info = vec_env.step(action)

    As SB3's: observations, rewards and dones carry a leading axis of ``num_envs``; an env whose episode ends is
    reset at once, its final observation in ``info[i]["terminal_observation"]`` and whether a time limit ended it in
    ``info[i]["TimeLimit.truncated"]``; ``seed(s)`` seeds the next ``reset`` (env ``i`` gets ``s + i``).

    It steps the model's own env. The training loop keeps the observations it acts from between ``learn`` calls:
    once this view has reset or stepped the env they are stale, so the next ``learn`` (or the next step of a running
    one, when a callback did it) resets the env first, closing the running episodes in the replay buffer as
    truncated, and never stores a transition across the jump.
    """

    def __init__(self, env: Any) -> None:
        self._adapter = env if isinstance(env, EnvAdapter) else as_env_adapter(make_env(env))
        self.num_envs = self._adapter.n_envs
        self.observation_space = self._adapter.observation_space
        self.action_space = self._adapter.action_space
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self.render_mode: str | None = getattr(self._adapter.env, "render_mode", None)
        self.metadata: dict[str, Any] = dict(getattr(self._adapter.env, "metadata", None) or {})
        self._seed: int | None = None
        self._actions: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"VecEnv({self._adapter.env!r}, num_envs={self.num_envs})"

    @property
    def unwrapped(self) -> VecEnv:
        return self

    @property
    def envs(self) -> list[gym.Env]:
        """The gymnasium envs inside, as SB3's ``DummyVecEnv.envs`` (a vector env that runs them in other processes
        has none here)."""
        envs = self._sub_envs()
        if envs is None:
            raise AttributeError(f"{type(self._adapter.env).__name__} runs its envs elsewhere: it has no list of them")
        return envs

    # ------------------------------------------------------------------ stepping
    def reset(self) -> Obs:
        obs, self.reset_infos = self._adapter.reset_with_infos(self._seed)
        self._seed = None  # a seed applies to one reset, as SB3's
        self._adapter.stepped_outside = True
        return obs

    def step_async(self, actions: Any) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[Obs, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions): call step(actions), or step_async first")
        actions, self._actions = self._actions, None
        next_obs, obs, rewards, terminated, truncated, env_infos = self._adapter.step(actions)
        self._adapter.stepped_outside = True
        dones = terminated | truncated
        infos = [dict(info) for info in env_infos]  # the keys below are SB3's, not the env's own
        for i, info in enumerate(infos):
            info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = _copy_obs(_get_obs(next_obs, i))
        return obs, rewards, dones, infos

    def step(self, actions: Any) -> tuple[Obs, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.step_async(actions)
        return self.step_wait()

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed the next :meth:`reset`: env ``i`` gets ``seed + i`` (None leaves the envs' generators as they are)."""
        self._seed = seed
        return [None if seed is None else seed + i for i in range(self.num_envs)]

    def close(self) -> None:
        self._adapter.close()

    # ------------------------------------------------------------------ the envs inside
    def get_attr(self, attr_name: str, indices: Indices = None) -> list[Any]:
        """``attr_name`` of each env (found through its wrappers)."""
        envs, picked = self._sub_envs(), self._indices(indices)
        if envs is not None:
            return [envs[i].get_wrapper_attr(attr_name) for i in picked]
        values = self._adapter.env.get_attr(attr_name)
        return [values[i] for i in picked]

    def has_attr(self, attr_name: str) -> bool:
        try:
            self.get_attr(attr_name)
        except AttributeError:
            return False
        return True

    def set_attr(self, attr_name: str, value: Any, indices: Indices = None) -> None:
        """Set ``attr_name`` to ``value`` in each env (where a wrapper defines it, else on the outermost one)."""
        envs, picked = self._sub_envs(), self._indices(indices)
        if envs is not None:
            for i in picked:
                envs[i].set_wrapper_attr(attr_name, value)
            return
        self._require_all(picked, "set_attr")
        self._adapter.env.set_attr(attr_name, [value] * self.num_envs)

    def env_method(self, method_name: str, *method_args: Any, indices: Indices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call ``method_name`` of each env; returns what each call returns."""
        envs, picked = self._sub_envs(), self._indices(indices)
        if envs is not None:
            return [envs[i].get_wrapper_attr(method_name)(*method_args, **method_kwargs) for i in picked]
        self._require_all(picked, "env_method")
        return list(self._adapter.env.call(method_name, *method_args, **method_kwargs))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Indices = None) -> list[bool]:
        envs = self.envs
        out = []
        for i in self._indices(indices):
            env, found = envs[i], False
            while isinstance(env, gym.Wrapper) and not found:
                found, env = isinstance(env, wrapper_class), env.env
            out.append(found)
        return out

    # ------------------------------------------------------------------ rendering
    def get_images(self) -> list[np.ndarray | None]:
        """Each env's ``render()`` frame (envs made with ``render_mode="rgb_array"``)."""
        frames = self._adapter.env.render()
        return [frames] if isinstance(self._adapter, SingleEnv) else list(frames or [None] * self.num_envs)

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """Render the envs: an ``"rgb_array"`` env returns its frame (several envs' frames tiled in a grid); a
        ``"human"`` one draws itself. The mode is the one the env was made with (gymnasium >= 0.26)."""
        if mode is not None and mode != self.render_mode:
            warnings.warn(f"this env renders in mode {self.render_mode!r}, fixed when it was made (gymnasium >= 0.26); "
                          f"make it with render_mode={mode!r} to render so", stacklevel=2)
            return None
        if self.render_mode is None:
            warnings.warn("the env was made without a render_mode: make it with render_mode='human' or 'rgb_array' "
                          "to render", stacklevel=2)
            return None
        if self.render_mode != "rgb_array":
            self._adapter.env.render()
            return None
        frames = self.get_images()
        if any(frame is None for frame in frames):
            return None
        return _tile(frames)

    # ------------------------------------------------------------------ helpers
    def _sub_envs(self) -> list[gym.Env] | None:
        env = self._adapter.env
        if isinstance(self._adapter, SingleEnv):
            return [env]
        return list(env.envs) if hasattr(env, "envs") else None  # a SyncVectorEnv's (or an SB3 DummyVecEnv's)

    def _indices(self, indices: Indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            return [int(indices)]
        return [int(i) for i in indices]

    def _require_all(self, picked: list[int], what: str) -> None:
        if sorted(picked) != list(range(self.num_envs)):
            raise ValueError(f"{type(self._adapter.env).__name__} runs its envs in other processes: {what} reaches "
                             f"all of them at once (indices=None); use a SyncVectorEnv to reach some of them")


def _tile(frames: Sequence[np.ndarray]) -> np.ndarray:
    """Frames ``(h, w, c)`` in a grid as square as it can be, row by row; one frame is returned as it is."""
    if len(frames) == 1:
        return np.asarray(frames[0])
    stack = np.stack([np.asarray(f) for f in frames])
    n, h, w = stack.shape[:3]
    rows = int(np.ceil(np.sqrt(n)))
    cols = int(np.ceil(n / rows))
    grid = np.zeros((rows * cols, *stack.shape[1:]), dtype=stack.dtype)
    grid[:n] = stack
    grid = grid.reshape(rows, cols, h, w, -1).swapaxes(1, 2)
    return grid.reshape(rows * h, cols * w, -1)


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
