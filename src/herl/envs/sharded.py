"""Many envs in a few processes: a vector env whose envs are split into shards, each shard stepped in a process.

gymnasium's ``AsyncVectorEnv`` gives every env a process of its own, which suits a handful of envs on a machine with
a core each; with hundreds of envs it would start hundreds of processes. :class:`ShardedVectorEnv` starts
``n_processes`` (a machine's cores, say) and hands each a contiguous shard of the envs, which it steps one after
another, as ``SyncVectorEnv`` would, while the other processes step theirs. Fetch envs of one shard share one MuJoCo
model (:func:`~herl.envs.shared_models.shared_mujoco_models`).

It behaves as a ``SyncVectorEnv`` of the same envs in ``SAME_STEP`` autoreset mode: the same observations, rewards,
flags and infos (``final_obs`` and ``final_info`` for the envs whose episodes ended, which have been reset), to the
bit, whatever the number of processes; ``call`` and ``set_attr`` reach every env as ``AsyncVectorEnv``'s do::

    envs = ShardedVectorEnv([lambda: gymnasium.make("FetchPush-v4")] * 1024, n_processes=16)
    obs, infos = envs.reset(seed=0)
    obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import CloudpickleWrapper, batch_space, concatenate, create_empty_array, iterate


class ShardedVectorEnv(VectorEnv):
    """``len(env_fns)`` envs in ``n_processes`` processes (at most one per env), each stepping a contiguous shard of
    them one after another; ``SAME_STEP`` autoreset. ``context``: the multiprocessing start method (``"spawn"``
    by default, so no process inherits a copy of the parent's threads)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], n_processes: int, *, context: str = "spawn") -> None:
        self._pipes: list[Any] = []
        self._processes: list[Any] = []
        self.closed = False
        if not env_fns:
            raise ValueError("ShardedVectorEnv needs at least one env function")
        if isinstance(n_processes, bool) or not isinstance(n_processes, int) or n_processes < 1:
            raise ValueError(f"n_processes must be a whole number >= 1, got {n_processes!r}")
        self.num_envs = len(env_fns)
        self.env_fns = list(env_fns)  # as AsyncVectorEnv's: what makes a local env (HER's reward function) if needed
        ctx = multiprocessing.get_context(context)
        self.shards = [range(int(s[0]), int(s[-1]) + 1)
                       for s in np.array_split(np.arange(self.num_envs), min(n_processes, self.num_envs))]
        try:
            for shard in self.shards:
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_worker, name=f"herl-envs-{shard.start}-{shard.stop - 1}", daemon=True,
                                      args=(child, parent, CloudpickleWrapper([env_fns[i] for i in shard])))
                process.start()
                child.close()
                self._pipes.append(parent)
                self._processes.append(process)
            spaces = self._ask([])
        except BaseException:
            self.close(terminate=True)
            raise
        self.single_observation_space, self.single_action_space, self.metadata = spaces[0]
        if any(s[:2] != spaces[0][:2] for s in spaces[1:]):
            self.close()
            raise ValueError("the envs of a ShardedVectorEnv must share their observation and action spaces")
        self.metadata = {**self.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def n_processes(self) -> int:
        return len(self.shards)

    # ------------------------------------------------------------------ the vector env interface
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env: ``seed`` an int seeds env ``i`` with ``seed + i`` (as ``SyncVectorEnv``), a list one seed
        per env; ``options`` go to every env's reset."""
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} envs")
        if options and "reset_mask" in options:
            raise ValueError("ShardedVectorEnv autoresets in SAME_STEP mode: reset_mask is for DISABLED mode")
        parts = self._ask([("reset", ([seeds[i] for i in shard], options)) for shard in self.shards])
        infos: dict[str, Any] = {}
        for i, info in enumerate(info for _, shard_infos in parts for info in shard_infos):
            infos = self._add_info(infos, info, i)
        return self._join([obs for obs, _ in parts]), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        parts = self._ask([("step", actions[shard.start:shard.stop]) for shard in self.shards])
        infos: dict[str, Any] = {}
        i = 0
        for _, _, _, _, shard_infos, finals in parts:
            for info, final in zip(shard_infos, finals):
                if final is not None:  # as SyncVectorEnv: the final step's observation and info, then the reset's
                    infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
                infos = self._add_info(infos, info, i)
                i += 1
        obs = self._join([p[0] for p in parts])
        return (obs, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                np.concatenate([p[3] for p in parts]), infos)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name(*args, **kwargs)`` (or its attribute ``name``), in env order."""
        return tuple(value for part in self._ask([("call", (name, args, kwargs))] * self.n_processes) for value in part)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env: to ``values[i]`` for env ``i`` (a list or tuple of one per env), or to
        ``values`` itself."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr got {len(values)} values for {self.num_envs} envs")
        self._ask([("set_attr", (name, [values[i] for i in shard])) for shard in self.shards])

    def close(self, *, terminate: bool = False, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        if not terminate:
            for pipe in self._pipes:
                try:
                    pipe.send(("close", None))
                except OSError:  # the process is gone
                    pass
        for process in self._processes:
            process.join(timeout=None if not terminate else 1)
            if process.is_alive():
                process.terminate()
                process.join()
        for pipe in self._pipes:
            pipe.close()

    def __enter__(self) -> ShardedVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not self.closed:
            self.close(terminate=True)

    def __repr__(self) -> str:
        return f"ShardedVectorEnv(num_envs={self.num_envs}, n_processes={self.n_processes})"

    # ------------------------------------------------------------------ helpers
    def _ask(self, messages: list[Any]) -> list[Any]:
        """Send each process its message (none: only read what they sent), then return their answers in order; an
        env's error is raised here, with the env process's traceback."""
        if self.closed:
            raise RuntimeError("this ShardedVectorEnv is closed")
        for pipe, shard, message in zip(self._pipes, self.shards, messages):
            try:
                pipe.send(message)
            except OSError:  # BrokenPipeError: the process is gone
                self._lost(shard)
        answers = []
        for pipe, shard in zip(self._pipes, self.shards):
            try:
                ok, value = pipe.recv()
            except (EOFError, OSError):
                self._lost(shard)
            answers.append((ok, value, shard))
        for ok, value, shard in answers:
            if not ok:
                raise RuntimeError(f"an env of envs {shard.start}-{shard.stop - 1} raised, in its process:\n{value}")
        return [value for _, value, _ in answers]

    def _lost(self, shard: range) -> None:
        self.close(terminate=True)
        raise RuntimeError(f"the process stepping envs {shard.start}-{shard.stop - 1} ended unexpectedly (out of "
                           f"memory, or killed): the vector env is closed")

    def _join(self, parts: list[Any]) -> Any:
        return _join(self.single_observation_space, parts)


def _join(space: gym.Space, parts: list[Any]) -> Any:
    """Shards' batched observations joined into one batch along the first axis."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _join(sub, [p[key] for p in parts]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_join(sub, [p[i] for p in parts]) for i, sub in enumerate(space.spaces))
    return np.concatenate(parts)


def _worker(pipe: Any, parent_pipe: Any, env_fns: CloudpickleWrapper) -> None:
    """A process's loop: build its shard's envs, then answer commands until ``close``. Every answer is ``(True,
    value)``, or ``(False, traceback)`` when an env raised (the process goes on, so the parent can close it)."""
    from herl.envs.shared_models import make_envs_sharing_models

    parent_pipe.close()
    envs: list[gym.Env] = []
    try:
        envs = make_envs_sharing_models(env_fns.fn)
        space = envs[0].observation_space
        out = create_empty_array(space, len(envs))
        pipe.send((True, (space, envs[0].action_space, dict(envs[0].metadata))))
    except BaseException:
        pipe.send((False, traceback.format_exc()))
        return
    try:
        while True:
            command, data = pipe.recv()
            if command == "close":
                break
            try:
                pipe.send((True, _answer(envs, space, out, command, data)))
            except Exception:
                pipe.send((False, traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):  # the parent is gone
        pass
    finally:
        for env in envs:
            env.close()


def _answer(envs: list[gym.Env], space: gym.Space, out: Any, command: str, data: Any) -> Any:
    if command == "step":
        observations, rewards, terminated, truncated, infos, finals = [], [], [], [], [], []
        for env, action in zip(envs, data):
            obs, reward, term, trunc, info = env.step(action)
            final = None
            if term or trunc:
                final = (obs, info)
                obs, info = env.reset()
            observations.append(obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
            infos.append(info)
            finals.append(final)
        batch = concatenate(space, observations, out)  # reused: sending pickles it before the next command
        return (batch, np.array(rewards, dtype=np.float64), np.array(terminated, dtype=np.bool_),
                np.array(truncated, dtype=np.bool_), infos, finals)
    if command == "reset":
        seeds, options = data
        results = [env.reset(seed=seed, options=options) for env, seed in zip(envs, seeds)]
        return concatenate(space, [obs for obs, _ in results], out), [info for _, info in results]
    if command == "call":
        name, args, kwargs = data
        values = []
        for env in envs:
            attr = env.get_wrapper_attr(name)
            values.append(attr(*args, **kwargs) if callable(attr) else attr)
        return values
    if command == "set_attr":
        name, values = data
        for env, value in zip(envs, values):
            env.set_wrapper_attr(name, value)
        return None
    raise ValueError(f"unknown command {command!r}")
