"""Check that a batched goal env keeps the promises of :class:`~herl.batched.env.BatchedGoalEnv`.

The batched buffer and training loop trust the env on many small points: shapes and dtypes, the device, rewards that
``compute_reward`` reproduces to the bit, ended episodes restarted inside ``step`` while ``final_obs`` keeps their
last observation, truncation exactly at ``max_episode_steps``, a ``state_dict`` that resumes bit-identically. When
one of these is wrong, training rarely crashes: it relabels with the wrong goals or rewards and silently learns less.
:func:`check_batched_goal_env` turns each such mistake into an error that says what to fix.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import BatchedGoalEnv, BatchedStep
from herl.envs.checks import GOAL_ENV_KEYS, GoalEnvError, GoalEnvWarning
from herl.errors import check, integer

# The seed of the checker's seeded resets and of its own random actions.
_SEED = 12345
_FLAGS = ("terminated", "truncated", "success")


def check_batched_goal_env(env: BatchedGoalEnv, *, steps: int = 100) -> None:
    """Raise :class:`~herl.envs.GoalEnvError` (a ``ValueError``) if ``env`` breaks the batched goal env interface.

    Checks, in order:

    1. the attributes: ``n_envs``, ``device``, ``max_episode_steps``, a ``single_observation_space`` that is a
       ``Dict`` of 1-D float32 ``Box`` es under ``observation``, ``achieved_goal`` and ``desired_goal`` (the goals of
       one shape), and a ``Box`` or ``Discrete`` ``single_action_space``;
    2. ``reset(seed=s)`` twice gives the same observations, each a float32 tensor ``(n_envs, dim)`` on ``device``;
    3. over ``steps`` steps of random actions, every tensor of each :class:`BatchedStep` has its shape, dtype and
       device; ``compute_reward(achieved_goal=..., desired_goal=...)`` on ``final_obs``'s goals gives ``reward`` and
       ``compute_terminated`` gives ``terminated``, bit for bit, also for goals with other leading shapes;
       ``truncated`` is set exactly when an episode reaches ``max_episode_steps``; ``obs`` equals ``final_obs`` where
       no episode ended, and ended episodes were restarted (their ``obs`` is not ``final_obs``; the env's
       ``elapsed_steps``, where it has them, are back at 0); and no step changes the tensors it returned earlier;
    4. ``reset(seed=s)`` followed by the same actions gives the same steps again, and so does
       ``load_state_dict(state_dict())`` taken in mid-run (its tensors moved through the CPU, as a saved file does),
       over enough steps that every episode restarts.

    Also warns (:class:`~herl.envs.GoalEnvWarning`) when an observation falls outside its declared space.

    The checks step and reseed the env, so reset it afterwards.

    Args:
        env: The batched env to check.
        steps: Number of random steps of check 3; at least 1.
    """
    check("check_batched_goal_env", "steps", steps, integer(1))
    if not isinstance(env, BatchedGoalEnv):
        raise GoalEnvError(f"{type(env).__name__} is not a herl.batched.BatchedGoalEnv: subclass it, so that the "
                           "batched buffer and training loop accept the env")
    name = type(env).__name__
    _check_attributes(env, name)
    actions = _RandomActions(env)

    # 2. Seeded resets.
    first = env.reset(seed=_SEED)
    _check_obs(env, name, first, f"{name}.reset(seed={_SEED})")
    again = env.reset(seed=_SEED)
    _check_obs(env, name, again, f"{name}.reset(seed={_SEED}) (the second time)")
    for key in GOAL_ENV_KEYS:
        if not torch.equal(first[key], again[key]):
            raise GoalEnvError(f"{name}.reset(seed={_SEED}) twice gave different {key!r} "
                               f"({_difference(first[key], again[key])}): reset(seed=s) must reseed the env's "
                               "torch.Generator (generator.manual_seed(seed)) before drawing the new episodes, and "
                               "compute them deterministically")

    # 3. A rollout, every step checked.
    rollout = _Rollout(env, name)
    rollout.start(again)
    replay_length = min(steps, env.max_episode_steps + 1)
    recorded_actions, recorded_steps = [], []
    for index in range(steps):
        action = actions.draw()
        step = rollout.step(action, index)
        if index < replay_length:
            recorded_actions.append(action)
            recorded_steps.append(step)
    rollout.finish()

    # 4. The same steps again, from a seeded reset and from a saved state.
    env.reset(seed=_SEED)
    _compare_runs(name, recorded_steps, [env.step(action) for action in recorded_actions],
                  f"after {name}.reset(seed={_SEED}), the same actions gave different steps",
                  "reset(seed=s) must reseed every random generator the env draws from (also those of the restarts "
                  "inside step)")

    state = env.state_dict()
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise GoalEnvError(f"{name}.state_dict() must return a dict of tensors (so that a checkpoint stores it "
                           f"without pickle), got {type(state).__name__} "
                           f"{ {k: type(v).__name__ for k, v in state.items()} if isinstance(state, Mapping) else ''}")
    # Through the CPU and back to the device, as a saved and loaded checkpoint is.
    saved = {key: value.detach().cpu().clone().to(env.device) for key, value in state.items()}
    length = env.max_episode_steps + 1  # every env's episode ends within this many steps: restarts are covered
    later_actions = [actions.draw() for _ in range(length)]
    expected = [env.step(action) for action in later_actions]
    env.load_state_dict(saved)
    _compare_runs(name, expected, [env.step(action) for action in later_actions],
                  f"after {name}.load_state_dict(state_dict()), the same actions gave different steps",
                  "state_dict() must hold every state tensor, the step counters and the random generator's state "
                  "(generator.get_state()), and load_state_dict must restore them all")


# ---------------------------------------------------------------------------------------------------------------------
# Attributes and observations


def _check_attributes(env: BatchedGoalEnv, name: str) -> None:
    for attribute in ("n_envs", "device", "max_episode_steps", "single_observation_space", "single_action_space"):
        if not hasattr(env, attribute):
            raise GoalEnvError(f"{name} has no attribute {attribute!r}: set it in the constructor (see "
                               "herl.batched.BatchedGoalEnv)")
    for attribute in ("n_envs", "max_episode_steps"):
        value = getattr(env, attribute)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise GoalEnvError(f"{name}.{attribute} is {value!r}: it must be an int >= 1")
    if not isinstance(env.device, torch.device):
        raise GoalEnvError(f"{name}.device is {env.device!r} ({type(env.device).__name__}): it must be a "
                           "torch.device, e.g. torch.device('cuda', 0)")

    space = env.single_observation_space
    if not isinstance(space, spaces.Dict):
        raise GoalEnvError(f"{name}.single_observation_space is {type(space).__name__}, not gymnasium.spaces.Dict: "
                           f"one env's observation is a dict with the keys {list(GOAL_ENV_KEYS)}")
    missing = [key for key in GOAL_ENV_KEYS if key not in space.spaces]
    if missing:
        raise GoalEnvError(f"{name}.single_observation_space lacks the key(s) {missing} (it has "
                           f"{list(space.spaces)}): a goal env's observation has the keys {list(GOAL_ENV_KEYS)}")
    for key in GOAL_ENV_KEYS:
        box = space[key]
        if not isinstance(box, spaces.Box) or box.dtype != np.float32 or len(box.shape) != 1:
            described = f"{type(box).__name__} {getattr(box, 'shape', '')} {getattr(box, 'dtype', '')}"
            raise GoalEnvError(f"{name}.single_observation_space[{key!r}] is {described}: each key must be a 1-D "
                               "float32 Box, as the observations are float32 tensors (n_envs, dim)")
    if space["achieved_goal"].shape != space["desired_goal"].shape:
        raise GoalEnvError(f"{name}: achieved_goal has shape {space['achieved_goal'].shape} but desired_goal "
                           f"{space['desired_goal'].shape}: they must be equal, since HER substitutes achieved goals "
                           "for desired goals")
    if not isinstance(env.single_action_space, (spaces.Box, spaces.Discrete)):
        raise GoalEnvError(f"{name}.single_action_space is {type(env.single_action_space).__name__}: batched envs "
                           "take a Box or a Discrete action space")


def _check_tensor(name: str, where: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype,
                  device: torch.device) -> None:
    if not isinstance(value, torch.Tensor):
        raise GoalEnvError(f"{where} is a {type(value).__name__}, not a torch.Tensor: {name} must return tensors "
                           f"on its device ({device})")
    if tuple(value.shape) != shape:
        raise GoalEnvError(f"{where} has shape {tuple(value.shape)}, expected {shape}: the env axis first "
                           f"(n_envs), then the shape of one env's value")
    if value.dtype != dtype:
        raise GoalEnvError(f"{where} has dtype {value.dtype}, expected {dtype}: convert it in the env (e.g. "
                           f".to({dtype})), so the buffer stores what it was built for")
    if value.device != device:
        raise GoalEnvError(f"{where} is on {value.device} but {name}.device is {device}: keep every tensor on the "
                           "env's device")


def _check_obs(env: BatchedGoalEnv, name: str, obs: Any, where: str) -> None:
    if not isinstance(obs, Mapping) or any(key not in obs for key in GOAL_ENV_KEYS):
        keys = list(obs) if isinstance(obs, Mapping) else None
        raise GoalEnvError(f"{where} returned a {type(obs).__name__} with keys {keys}: return a dict of tensors "
                           f"with the keys {list(GOAL_ENV_KEYS)}")
    for key in GOAL_ENV_KEYS:
        box = env.single_observation_space[key]
        _check_tensor(name, f"{where}[{key!r}]", obs[key], (env.n_envs, *box.shape), torch.float32, env.device)
        low = torch.as_tensor(box.low, device=env.device)
        high = torch.as_tensor(box.high, device=env.device)
        if not bool(((obs[key] >= low) & (obs[key] <= high)).all()):
            warnings.warn(f"{where}[{key!r}] has values outside single_observation_space[{key!r}]: declare the "
                          "bounds of the values the env returns", GoalEnvWarning, stacklevel=4)


# ---------------------------------------------------------------------------------------------------------------------
# The rollout


class _RandomActions:
    """Uniform actions from the action space, drawn on the CPU with a fixed seed and moved to the env's device."""

    def __init__(self, env: BatchedGoalEnv) -> None:
        self.env = env
        self.generator = torch.Generator().manual_seed(_SEED)

    def draw(self) -> torch.Tensor:
        space, n = self.env.single_action_space, self.env.n_envs
        if isinstance(space, spaces.Discrete):
            start = int(space.start)
            draws = torch.randint(start, start + int(space.n), (n,), generator=self.generator)
        else:
            low = torch.as_tensor(space.low, dtype=torch.float32)
            high = torch.as_tensor(space.high, dtype=torch.float32)
            bounded = torch.isfinite(low) & torch.isfinite(high)
            uniform = low.where(bounded, 0.0) + torch.rand((n, *space.shape), generator=self.generator) * (
                high - low).where(bounded, 1.0)
            draws = uniform.where(bounded, torch.randn((n, *space.shape), generator=self.generator))
            draws = draws.to(torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype)
        return draws.to(self.env.device)


class _Rollout:
    """Steps the env and checks each step against what came before."""

    def __init__(self, env: BatchedGoalEnv, name: str) -> None:
        self.env, self.name = env, name
        self.count = torch.zeros(env.n_envs, dtype=torch.int64, device=env.device)
        self.ended_episodes = 0
        self.any_restart_differs = False
        self.previous: list[tuple[torch.Tensor, torch.Tensor, str]] = []

    def start(self, obs: dict[str, torch.Tensor]) -> None:
        self._check_counters("after reset")
        self.previous = [(obs[key], obs[key].clone(), f"reset()'s {key!r}") for key in GOAL_ENV_KEYS]

    def step(self, actions: torch.Tensor, index: int) -> BatchedStep:
        env, name = self.env, self.name
        n = env.n_envs
        step = env.step(actions)
        where = f"{name}.step (rollout step {index})"
        if not isinstance(step, BatchedStep):
            raise GoalEnvError(f"{where} returned a {type(step).__name__}: return a herl.batched.BatchedStep(obs, "
                               "final_obs, reward, terminated, truncated, success)")
        _check_obs(env, name, step.obs, f"{where}'s obs")
        _check_obs(env, name, step.final_obs, f"{where}'s final_obs")
        _check_tensor(name, f"{where}'s reward", step.reward, (n,), torch.float32, env.device)
        for flag in _FLAGS:
            _check_tensor(name, f"{where}'s {flag}", getattr(step, flag), (n,), torch.bool, env.device)

        # Earlier observations are stored by reference in buffers: a step must not write into them.
        for tensor, copy, what in self.previous:
            if not torch.equal(tensor, copy):
                raise GoalEnvError(f"{where} changed {what} in place: return new tensors from reset and step (e.g. "
                                   "position.clone()), since buffers keep the ones they were given")
        self.previous = [(step.obs[key], step.obs[key].clone(), f"an earlier step's obs[{key!r}]")
                         for key in GOAL_ENV_KEYS]
        self.previous += [(step.final_obs[key], step.final_obs[key].clone(), f"an earlier step's final_obs[{key!r}]")
                          for key in GOAL_ENV_KEYS]

        self._check_goal_functions(step, where, first=index == 0)
        self._check_episodes(step, where)
        return step

    def finish(self) -> None:
        if self.ended_episodes and not self.any_restart_differs:
            raise GoalEnvError(
                f"{self.name}.step: in all {self.ended_episodes} episodes that ended, obs equals final_obs: step must "
                "restart the ended envs itself and return the new episode's first observation as obs (and the ended "
                "episode's last as final_obs)")

    def _check_goal_functions(self, step: BatchedStep, where: str, *, first: bool) -> None:
        env, name = self.env, self.name
        achieved, desired = step.final_obs["achieved_goal"], step.final_obs["desired_goal"]
        reward = _call(name, "compute_reward", env.compute_reward, achieved, desired)
        _check_tensor(name, f"{name}.compute_reward(final_obs goals)", reward, (env.n_envs,), torch.float32,
                      env.device)
        if not torch.equal(reward, step.reward):
            i = _first_difference(reward, step.reward)
            raise GoalEnvError(
                f"compute_reward disagrees with step: at {where}, env {i}, step returned reward "
                f"{step.reward[i].item()!r} but compute_reward(achieved_goal=final_obs['achieved_goal'], "
                f"desired_goal=final_obs['desired_goal']) returned {reward[i].item()!r}. step must compute its reward "
                "with compute_reward on the new achieved goal (final_obs's), so relabeled rewards agree with it")
        terminated = _call(name, "compute_terminated", env.compute_terminated, achieved, desired)
        _check_tensor(name, f"{name}.compute_terminated(final_obs goals)", terminated, (env.n_envs,), torch.bool,
                      env.device)
        if not torch.equal(terminated, step.terminated):
            i = _first_difference(terminated, step.terminated)
            raise GoalEnvError(
                f"compute_terminated disagrees with step: at {where}, env {i}, step returned terminated="
                f"{step.terminated[i].item()} but compute_terminated(final_obs goals) returned "
                f"{terminated[i].item()}. An env that ends episodes on success must override compute_terminated "
                "(and step use it), so relabeled transitions stop bootstrapping where a real episode ends")
        if first:
            self._check_vectorized(step, reward, terminated)

    def _check_vectorized(self, step: BatchedStep, reward: torch.Tensor, terminated: torch.Tensor) -> None:
        """HER relabels goals of other leading shapes: (batch, k, dim) stacks and single goals."""
        env, name = self.env, self.name
        achieved, desired = step.final_obs["achieved_goal"], step.final_obs["desired_goal"]
        # The second row asks each env's achieved goal of the next observation, as a relabeled goal would.
        other = step.obs["achieved_goal"]
        hint = ("goals of any leading shape (..., goal_dim) must give values of shape (...), each as for the goals "
                "alone: reduce over the last axis only (dim=-1)")
        for function_name, function, expected_first in (("compute_reward", env.compute_reward, reward),
                                                        ("compute_terminated", env.compute_terminated, terminated)):
            stacked = _call(name, function_name, function, torch.stack([achieved, achieved]),
                            torch.stack([desired, other]))
            expected = torch.stack([expected_first, _call(name, function_name, function, achieved, other)])
            if not isinstance(stacked, torch.Tensor) or stacked.shape != expected.shape or \
                    not torch.equal(stacked, expected):
                raise GoalEnvError(f"{name}.{function_name} on goals of shape (2, n_envs, goal_dim) did not return "
                                   f"the values it gives for each half, shape (2, n_envs): {hint}")
            single = _call(name, function_name, function, achieved[0], desired[0])
            if not isinstance(single, torch.Tensor) or single.shape != () or not torch.equal(single, expected_first[0]):
                raise GoalEnvError(f"{name}.{function_name} on one pair of goals (shape (goal_dim,)) did not return "
                                   f"a value of shape () equal to env 0's: {hint}")

    def _check_episodes(self, step: BatchedStep, where: str) -> None:
        limit = self.env.max_episode_steps
        self.count += 1
        late = (self.count >= limit) & ~step.truncated
        if bool(late.any()):
            i = _first_true(late)
            raise GoalEnvError(f"{where}: env {i} has run {self.count[i].item()} steps of its episode, reaching "
                               f"max_episode_steps={limit}, but truncated is False: set truncated where an episode "
                               "reaches max_episode_steps, and restart its env")
        early = (self.count < limit) & step.truncated
        if bool(early.any()):
            i = _first_true(early)
            raise GoalEnvError(f"{where}: env {i} is truncated after {self.count[i].item()} steps of its episode, "
                               f"before max_episode_steps={limit}: truncated means the time limit; restart each env's "
                               "step counter when its episode ends (terminated or truncated)")
        ended = step.terminated | step.truncated
        kept = ~ended
        for key in GOAL_ENV_KEYS:
            if not torch.equal(step.obs[key][kept], step.final_obs[key][kept]):
                i = _first_true(kept & (step.obs[key] != step.final_obs[key]).any(dim=-1))
                raise GoalEnvError(f"{where}: env {i}'s episode did not end but its obs[{key!r}] differs from "
                                   f"final_obs[{key!r}]: obs is the new observation, and only where an episode ended "
                                   "the next episode's first one")
        if bool(ended.any()):
            self.ended_episodes += int(ended.sum())
            differs = torch.zeros_like(ended)
            for key in GOAL_ENV_KEYS:
                differs |= (step.obs[key] != step.final_obs[key]).any(dim=-1)
            self.any_restart_differs |= bool((differs & ended).any())
        self.count = self.count.masked_fill(ended, 0)
        self._check_counters(f"at {where}")

    def _check_counters(self, when: str) -> None:
        elapsed = getattr(self.env, "elapsed_steps", None)
        if isinstance(elapsed, torch.Tensor) and not torch.equal(elapsed.to(self.count), self.count):
            i = _first_true(elapsed.to(self.count) != self.count)
            raise GoalEnvError(f"{self.name}.elapsed_steps of env {i} is {elapsed[i].item()} {when}, but its episode "
                               f"has run {self.count[i].item()} steps: restart each env's step counter when its "
                               "episode ends (terminated or truncated), and only then")


# ---------------------------------------------------------------------------------------------------------------------
# Helpers


def _call(name: str, function_name: str, function: Any, achieved: torch.Tensor, desired: torch.Tensor) -> Any:
    # By keyword, as HER buffers call it: a reward function with its goals swapped fails here, not in training.
    try:
        return function(achieved_goal=achieved, desired_goal=desired)
    except Exception as error:
        raise GoalEnvError(f"{name}.{function_name}(achieved_goal=..., desired_goal=...) raised "
                           f"{type(error).__name__} on goals of shape {tuple(achieved.shape)}: {error}. It must take "
                           "the goals by these names, with any leading shape") from error


def _compare_runs(name: str, expected: list[BatchedStep], got: list[BatchedStep], what: str, fix: str) -> None:
    for index, (a, b) in enumerate(zip(expected, got)):
        fields = [(f"obs[{key!r}]", a.obs[key], b.obs[key]) for key in GOAL_ENV_KEYS]
        fields += [(f"final_obs[{key!r}]", a.final_obs[key], b.final_obs[key]) for key in GOAL_ENV_KEYS]
        fields += [(field, getattr(a, field), getattr(b, field)) for field in ("reward", *_FLAGS)]
        for field, first, second in fields:
            if not isinstance(second, torch.Tensor) or first.shape != second.shape or not torch.equal(first, second):
                raise GoalEnvError(f"{what} ({field} at step {index}): {fix}")


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> int:
    return _first_true(a != b)


def _first_true(mask: torch.Tensor) -> int:
    return int(mask.nonzero()[0, 0])


def _difference(a: torch.Tensor, b: torch.Tensor) -> str:
    """Where two tensors of one shape differ, in words: how many entries, by how much at most, in which columns."""
    differ = a != b
    gap = (a.double() - b.double()).abs().max().item() if a.is_floating_point() else None
    columns = differ.reshape(differ.shape[0], -1).any(dim=0).nonzero().flatten().tolist() if a.ndim > 1 else []
    return (f"{int(differ.sum())} of {a.numel()} entries" + (f", by at most {gap:.3g}" if gap is not None else "")
            + (f", in columns {columns[:12]}" if columns else ""))
