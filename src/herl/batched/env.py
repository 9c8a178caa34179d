"""The interface of batched goal envs: thousands of copies of one goal env stepped at once, as tensors on one device.

A single gymnasium env hands out one NumPy observation per step and costs a Python call per env; a GPU simulator
(MuJoCo MJX or Warp, brax) steps every copy in one kernel and keeps the results on the device. This interface is
what the batched HER buffer and training loop need from such a simulator, and no more:

- every tensor has the env axis first (``n_envs``) and lives on ``device``, so rollouts never leave the device;
- ``step`` resets the envs whose episode ended itself and returns both the observation to act on next (``obs``)
  and the real last observation of the ended episode (``final_obs``), so HER relabels with the true final state
  (gymnasium's vector envs need their autoreset mode set for this; here there is only one mode);
- ``terminated`` and ``truncated`` come separately: a time limit is bootstrapped through, a success that ends the
  episode is not;
- ``compute_reward`` and ``compute_terminated`` take goals with any leading shape and are the functions ``step``
  itself uses, so relabeled transitions get the rewards ``step`` would have given, to the bit;
- ``state_dict`` holds everything, the random generator included, so a saved run continues bit-identically.

:func:`herl.batched.checks.check_batched_goal_env` checks an implementation against all of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, NamedTuple

import gymnasium
import torch

from herl.errors import NON_NEGATIVE_INT, check


class BatchedStep(NamedTuple):
    """What :meth:`BatchedGoalEnv.step` returns: one entry per env, all on the env's device."""

    obs: dict[str, torch.Tensor]
    """The observation to act on next: where an episode ended, the new episode's first observation."""
    final_obs: dict[str, torch.Tensor]
    """The observation each env's step led to, before any reset: the true next observation, the one to store."""
    reward: torch.Tensor
    """``(n_envs,)`` float32."""
    terminated: torch.Tensor
    """``(n_envs,)`` bool: the episode ended in a state with no future (do not bootstrap)."""
    truncated: torch.Tensor
    """``(n_envs,)`` bool: the episode reached ``max_episode_steps`` (bootstrap through it)."""
    success: torch.Tensor
    """``(n_envs,)`` bool: the step's new achieved goal reached the desired goal."""


class BatchedGoalEnv:
    """Base class of batched goal envs: ``n_envs`` copies of one goal env, stepped together as tensors on ``device``.

    Subclasses set the attributes below in their constructor and implement :meth:`reset`, :meth:`step`,
    :meth:`compute_reward`, :meth:`state_dict` and :meth:`load_state_dict` (and :meth:`compute_terminated` when
    success ends an episode). Implementations step all envs with tensor operations, never a Python loop over the
    envs, and avoid reading values back to the host inside ``step`` (each read waits for the device).

    Observations are dicts with the keys ``observation``, ``achieved_goal`` and ``desired_goal``, each a float32
    tensor of shape ``(n_envs, *single_observation_space[key].shape)`` on ``device``.

    Attributes:
        n_envs: Number of envs stepped together.
        device: Where every tensor lives.
        max_episode_steps: Steps after which an episode is truncated; no episode is longer (the buffer sizes its
            episodes by it).
        single_observation_space: One env's observation space: a ``Dict`` of float32 ``Box`` es under the three
            keys; build models from it.
        single_action_space: One env's action space, a ``Box`` or a ``Discrete``.
    """

    n_envs: int
    device: torch.device
    max_episode_steps: int
    single_observation_space: gymnasium.spaces.Dict
    single_action_space: gymnasium.spaces.Space

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Start a new episode in every env and return the first observations.

        ``seed`` reseeds the env's ``torch.Generator`` (on ``device``) first, so the same seed gives the same
        episodes; None continues the generator's stream.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement reset(seed=None)")

    def step(self, actions: torch.Tensor) -> BatchedStep:
        """Apply one action per env and return what followed.

        ``actions`` has shape ``(n_envs, *single_action_space.shape)`` (a ``Discrete`` space: ``(n_envs,)`` int64)
        and lives on ``device``. Envs whose episode ended (terminated or truncated) start a new one inside ``step``:
        their ``obs`` is the new episode's first observation and ``final_obs`` the ended episode's last. Calling
        ``step`` before :meth:`reset` raises ``RuntimeError``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement step(actions)")

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """Reward of reaching ``achieved_goal`` when ``desired_goal`` was asked.

        Goals of any leading shape ``(..., goal_dim)`` give float32 rewards of shape ``(...)``. ``step`` uses this
        very function on its new achieved goals, so HER's relabeled rewards agree with the rewards of the rollouts to
        the bit.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement compute_reward(achieved_goal, desired_goal)")

    def compute_terminated(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """Whether reaching ``achieved_goal`` when ``desired_goal`` was asked ends the episode, shaped as
        :meth:`compute_reward`, bool. Here never (as in Fetch, where success does not end the episode); envs that
        end on success override it, and ``step`` uses it, so that relabeled transitions stop bootstrapping exactly
        where a real episode would have ended."""
        return torch.zeros(achieved_goal.shape[:-1], dtype=torch.bool, device=achieved_goal.device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything needed to continue bit-identically: the state tensors, the step counters and the random
        generator's state (``generator.get_state()``). Tensors only, so that a checkpoint can store them without
        pickle."""
        raise NotImplementedError(f"{type(self).__name__} must implement state_dict()")

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Continue from ``state``, a :meth:`state_dict` of an env built with the same arguments (its tensors may sit
        on any device)."""
        raise NotImplementedError(f"{type(self).__name__} must implement load_state_dict(state)")


# ---------------------------------------------------------------------------------------------------------------------
# Pieces the envs of this package share


class TensorStateEnv(BatchedGoalEnv):
    """Base of this package's envs, whose whole state is tensors: ``self._<name>`` for each of :attr:`state_names`,
    the steps of each running episode (``self._elapsed``), whether ``reset`` was called (``self._started``) and the
    random generator (``self._generator``). It gives them :meth:`state_dict`, :meth:`load_state_dict` (checked by
    :func:`load_state`) and :attr:`elapsed_steps`."""

    owner: ClassVar[str]
    """The name errors give the env."""
    state_names: ClassVar[tuple[str, ...]]
    """The env's state tensors, the keys of its :meth:`state_dict` beside the counters and the generator."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            **{name: getattr(self, f"_{name}").clone() for name in self.state_names},
            "elapsed_steps": self._elapsed.clone(),
            "started": torch.tensor(self._started, device=self.device),
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        loaded = load_state(self.owner, state, self.state_dict(), self.device)
        for name in self.state_names:
            setattr(self, f"_{name}", loaded[name])
        self._elapsed = loaded["elapsed_steps"]
        self._started = bool(loaded["started"])
        self._generator.set_state(loaded["generator"])

    @property
    def elapsed_steps(self) -> torch.Tensor:
        """``(n_envs,)`` int64: steps taken in each env's current episode (0 right after a reset)."""
        return self._elapsed.clone()


def resolve_device(device: torch.device | str) -> torch.device:
    """``device`` with its index filled in (``"cuda"`` becomes ``cuda:0``), so that it compares equal to the device
    of the tensors created on it."""
    device = torch.device(device)
    if device.type != "cpu" and device.index is None:
        device = torch.empty(0, device=device).device
    return device


def new_generator(device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from the operating system, so that envs never seeded differ from run to run
    (as gymnasium's do); ``reset(seed=...)`` makes them reproducible."""
    generator = torch.Generator(device=device)
    generator.seed()
    return generator


def reseed(owner: str, generator: torch.Generator, seed: int | None) -> None:
    """Reseed ``generator`` with ``seed`` (an integer >= 0), or leave it as it is for None."""
    if seed is not None:
        check(f"{owner}.reset", "seed", seed, NON_NEGATIVE_INT)
        generator.manual_seed(int(seed))


def require_reset(owner: str, started: bool) -> None:
    if not started:
        raise RuntimeError(f"{owner}.step() was called before reset(): call env.reset() (or load_state_dict) first")


def check_actions(owner: str, actions: torch.Tensor, shape: tuple[int, ...], device: torch.device, *,
                  integer: bool) -> None:
    """Refuse actions of the wrong type, shape or device with a message that says what was expected. Checks only
    what is known without reading the values (which would wait for the device)."""
    if not isinstance(actions, torch.Tensor):
        raise TypeError(f"{owner}.step takes a torch.Tensor of actions, got {type(actions).__name__}: convert with "
                        f"torch.as_tensor(actions, device={str(device)!r})")
    if tuple(actions.shape) != shape:
        raise ValueError(f"{owner}.step got actions of shape {tuple(actions.shape)}, expected {shape} (one action "
                         "per env, the env axis first)")
    if actions.device != device:
        raise ValueError(f"{owner}.step got actions on {actions.device} but the envs are on {device}: create the "
                         f"actions there, or move them with actions.to({str(device)!r})")
    if integer and (actions.is_floating_point() or actions.is_complex() or actions.dtype == torch.bool):
        raise ValueError(f"{owner}.step got actions of dtype {actions.dtype}: Discrete actions are integer indices, "
                         "e.g. torch.int64")
    if not integer and not actions.is_floating_point():
        raise ValueError(f"{owner}.step got actions of dtype {actions.dtype}: Box actions are floats, e.g. "
                         "torch.float32")


def check_goal_shape(owner: str, achieved_goal: torch.Tensor, desired_goal: torch.Tensor, goal_dim: int) -> None:
    if achieved_goal.shape[-1:] != (goal_dim,) or desired_goal.shape[-1:] != (goal_dim,):
        raise ValueError(f"{owner} takes goals of shape (..., {goal_dim}), got achieved_goal "
                         f"{tuple(achieved_goal.shape)} and desired_goal {tuple(desired_goal.shape)}")


def load_state(owner: str, state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
               device: torch.device) -> dict[str, torch.Tensor]:
    """The tensors of ``state`` moved to ``device``, after checking that they are the keys, shapes and dtypes of
    ``expected`` (the env's own ``state_dict()``). The generator's state stays on the CPU, where
    ``Generator.set_state`` wants it."""
    missing = sorted(set(expected) - set(state))
    unknown = sorted(set(state) - set(expected))
    if missing or unknown:
        raise ValueError(f"{owner}.load_state_dict: the state lacks {missing} and has unknown keys {unknown}: pass "
                         f"the state_dict() of a {owner} built with the same arguments")
    loaded = {}
    for key, mine in expected.items():
        value = state[key]
        if not isinstance(value, torch.Tensor) or value.shape != mine.shape or value.dtype != mine.dtype:
            got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{owner}.load_state_dict: {key!r} is {got}, expected {tuple(mine.shape)} {mine.dtype}: "
                             f"pass the state_dict() of a {owner} built with the same arguments (n_envs and sizes)")
        # A copy, so that later changes to the caller's tensors do not reach the env.
        loaded[key] = value.detach().to("cpu" if key == "generator" else device, copy=True)
    return loaded
