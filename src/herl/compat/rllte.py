"""rllte's ``HerReplayStorage`` on herl's HER engine.

rllte users write ``from rllte.xploit.storage import HerReplayStorage``; here it is
``from herl.compat.rllte import HerReplayStorage`` with the same constructor, ``add`` taking torch
tensors (dicts of them for observations), ``sample()`` returning a typed batch of float32 tensors on
``device``, and ``update`` accepting anything and doing nothing.

This class only translates: storage, goal selection and relabeling are :class:`herl.HerReplayBuffer`
(online relabeling, as rllte does it: a fraction k/(k+1) of each batch gets a hindsight goal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from herl.buffers import HerReplayBuffer
from herl.buffers.goal_functions import InfoBatch, bind_goal_function
from herl.errors import NON_NEGATIVE_INT, as_integer

# The engine's samples carry terminations only (as `dones`); truncation flags ride along as an
# extra observation key so that batches can carry them (engine change wanted: a `truncated` field
# on the samples, since the engine stores the flag anyway).
_TRUNCATED_KEY = "rllte:truncated"


class DictReplayBatch(NamedTuple):
    """A batch as rllte's dict replay storages return it: float32 tensors on the storage's device,
    ``rewards``, ``terminateds`` and ``truncateds`` shaped (batch_size, 1)."""

    observations: dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    terminateds: torch.Tensor
    truncateds: torch.Tensor
    next_observations: dict[str, torch.Tensor]


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _as_is(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else np.asarray(value)


class HerReplayStorage:
    """Hindsight experience replay storage with rllte's interface.

    Args:
        observation_space: a ``Dict`` with ``observation``, ``achieved_goal`` and ``desired_goal``.
        action_space: Box, Discrete, MultiDiscrete or MultiBinary.
        device: where sampled tensors go.
        storage_size: transitions held in all, split across ``num_envs``.
        num_envs: parallel environments; ``add`` takes one row per environment.
        batch_size: transitions per ``sample()``.
        goal_selection_strategy: "future", "final", "episode" or "random".
        num_goals: k; a fraction k/(k+1) of each batch gets a hindsight goal.
        reward_fn: required. Either the goal env (its ``compute_reward``, and ``compute_terminated``
            when it has one, are used) or a vectorized ``(achieved_goal, desired_goal, info) ->
            rewards``. rllte's default, an identity lambda, cannot compute a reward, so herl has none.
        copy_info_dict: store the numeric ``infos`` entries and pass them to the reward as a dict
            of arrays (one row per relabeled transition).
        seed: herl's addition: the seed of the storage's generator, for reproducible sampling.
        storage_device: herl's addition: keep the stored data as torch tensors on this device (e.g.
            "cuda"), so that tensors added there stay there and batches need no host copy. None
            (default) keeps it in host memory, as rllte does.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str = "cpu",
        storage_size: int = 1_000_000,
        num_envs: int = 1,
        batch_size: int = 1024,
        goal_selection_strategy: str = "future",
        num_goals: int = 4,
        reward_fn: Callable | Any = None,
        copy_info_dict: bool = False,
        *,
        seed: int | None = None,
        storage_device: str | None = None,
    ) -> None:
        env, compute_reward = _reward_source(reward_fn)
        if not isinstance(observation_space, spaces.Dict):
            raise ValueError(
                f"HerReplayStorage needs a Dict observation space (observation, achieved_goal, desired_goal), got "
                f"{type(observation_space).__name__}"
            )
        owner = "HerReplayStorage"
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.storage_size = as_integer(owner, "storage_size", storage_size)
        self.num_envs = as_integer(owner, "num_envs", num_envs)
        self.batch_size = as_integer(owner, "batch_size", batch_size)
        self.goal_selection_strategy = goal_selection_strategy
        self.num_goals = as_integer(owner, "num_goals", num_goals, NON_NEGATIVE_INT)
        self.copy_info_dict = bool(copy_info_dict)
        self._keys = list(observation_space.spaces)
        stored_space = spaces.Dict({**observation_space.spaces, _TRUNCATED_KEY: spaces.Box(0, 1, (), bool)})
        try:
            self._engine = HerReplayBuffer(
                self.storage_size, stored_space, action_space, env=env, device=self.device, n_envs=self.num_envs,
                n_sampled_goal=self.num_goals, goal_selection_strategy=goal_selection_strategy,
                copy_info_dict=self.copy_info_dict, compute_reward=compute_reward, seed=seed, storage_device=storage_device,
            )
        except ValueError as err:
            raise _in_rllte_words(err) from err
        # a device-resident engine takes tensors as they are; otherwise they come to the host here
        self._convert = _numpy if storage_device is None else _as_is

    @property
    def engine(self) -> HerReplayBuffer:
        """The herl engine underneath (e.g. for ``save``)."""
        return self._engine

    def __len__(self) -> int:
        return len(self._engine)

    def add(
        self,
        observations: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        rewards: torch.Tensor,
        terminateds: torch.Tensor,
        truncateds: torch.Tensor,
        infos: Mapping[str, Any] | None,
        next_observations: Mapping[str, torch.Tensor],
    ) -> None:
        """Store one transition per environment (tensors shaped ``(num_envs, ...)``).

        ``next_observations`` must be the true next observations: at an episode's end, the final
        observation, not the reset one that a vector env returns in its place.
        """
        truncated = _numpy(truncateds).astype(bool).reshape(self.num_envs)
        obs = self._observation_dict("observations", observations)
        next_obs = self._observation_dict("next_observations", next_observations)
        obs[_TRUNCATED_KEY] = next_obs[_TRUNCATED_KEY] = truncated
        try:  # with copy_info_dict, the reward function is first called here (once the info entries are known)
            self._engine.add(
                obs, next_obs, self._convert(actions), self._convert(rewards), terminated=_numpy(terminateds).astype(bool),
                truncated=truncated, infos=infos if infos is not None else {},
            )
        except ValueError as err:
            raise _in_rllte_words(err) from err

    def _observation_dict(self, name: str, value: Any) -> dict[str, Any]:
        """``value``'s entries of the observation space's keys, converted for the engine; a missing key is named (it
        was a bare KeyError)."""
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a dict of tensors with the keys {self._keys} (the observation space's), "
                            f"got {type(value).__name__}")
        missing = [key for key in self._keys if key not in value]
        if missing:
            raise ValueError(f"{name} lacks the key(s) {missing}: add() takes dicts with the observation space's keys "
                             f"{self._keys}, each a tensor shaped (num_envs, ...); got the keys {list(value)}")
        return {key: self._convert(value[key]) for key in self._keys}

    def sample(self, step: int | None = None) -> DictReplayBatch:
        """``batch_size`` transitions, a fraction k/(k+1) with hindsight goals. ``step`` (rllte
        passes the global step) is accepted and unused."""
        try:  # a goal env's reward function may be first called here
            batch = self._engine.sample(self.batch_size)
        except ValueError as err:
            raise _in_rllte_words(err) from err
        obs, next_obs = batch.observations, batch.next_observations
        return DictReplayBatch(
            observations={key: obs[key].float() for key in self._keys},
            actions=batch.actions.float(),
            rewards=batch.rewards.float(),
            terminateds=batch.dones.float(),
            truncateds=obs[_TRUNCATED_KEY].float().reshape(-1, 1),
            next_observations={key: next_obs[key].float() for key in self._keys},
        )

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to update (rllte calls this after each training step); accepts any arguments."""

    def reset(self) -> None:
        """Forget everything stored."""
        self._engine.reset()


def _in_rllte_words(err: ValueError) -> ValueError:
    """The engine's errors name its ``compute_reward``; this interface's user passed ``reward_fn``."""
    return ValueError(str(err).replace("compute_reward", "reward_fn")) if "compute_reward" in str(err) else err


def _reward_source(reward_fn: Any) -> tuple[Any, Callable | None]:
    """(env, compute_reward) for the engine, from a goal env or a reward function."""
    if reward_fn is None:
        raise ValueError(
            "HerReplayStorage needs reward_fn to relabel goals: pass the goal env (its compute_reward is used) or a "
            "vectorized reward_fn(achieved_goal, desired_goal, info) -> rewards. (rllte's default, lambda x: x, "
            "cannot compute a reward, so herl has no default.)"
        )
    if hasattr(reward_fn, "compute_reward") or isinstance(reward_fn, (gym.Env, gym.vector.VectorEnv)):
        return reward_fn, None
    if callable(reward_fn):
        call = bind_goal_function(reward_fn)

        def compute_reward(achieved_goal: Any, desired_goal: Any, info: Any) -> Any:
            # rllte hands reward_fn the copied info entries as a dict of arrays
            return call(achieved_goal, desired_goal, info.entries if isinstance(info, InfoBatch) else info)

        return None, compute_reward
    raise TypeError(
        f"reward_fn must be a goal env (with compute_reward) or a callable, got {type(reward_fn).__name__}"
    )
