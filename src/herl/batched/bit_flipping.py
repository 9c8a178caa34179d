"""Bit flipping, batched: thousands of bit vectors flipped towards their goal at once, as tensors.

The twin of :class:`herl.envs.BitFlippingEnv` in its default form (random initial state, goal all ones, one bit
flipped per action), for training with many envs on one device. Its episodes end on success, so, unlike PointReach,
the envs' episodes have different lengths and end at different steps.
"""

from __future__ import annotations


import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import (
    BatchedStep,
    TensorStateEnv,
    check_actions,
    check_goal_shape,
    new_generator,
    require_reset,
    reseed,
    resolve_device,
)
from herl.errors import POSITIVE_INT, check

_OWNER = "BatchedBitFlipping"


class BatchedBitFlipping(TensorStateEnv):
    """``n_envs`` vectors of ``n_bits`` bits; each action flips one bit, until the state equals the goal.

    As :class:`herl.envs.BitFlippingEnv` with its default arguments: each episode starts from uniformly random bits
    (which may already equal the goal) with the goal all ones; action ``i`` (``Discrete(n_bits)``) flips bit ``i``.
    The observation and the achieved goal are the state's bits and the desired goal the goal's, as float32 0.0 and
    1.0 (so models and normalizers take them as they are). The reward is 0.0 when the state equals the goal and -1.0
    otherwise. The episode is terminated on success and truncated after ``max_episode_steps`` steps; on the step
    where both happen both flags are True, as in BitFlippingEnv. Ended episodes restart inside ``step``.

    Every step draws new starting bits for all envs and keeps those of the envs whose episode ended, so the random
    stream does not depend on which envs ended. An action outside ``[0, n_bits)`` raises ``ValueError``; checking
    costs one read of a boolean from the device per step.

    Args:
        n_envs: Number of envs stepped together.
        n_bits: Number of bits of the state and the goal.
        max_episode_steps: Steps before an episode is truncated; None for ``n_bits`` (the fewest that always
            suffice), as BitFlippingEnv's ``max_steps``.
        device: Where the envs' tensors live (``"cpu"``, ``"cuda"``, ...).
    """

    owner = _OWNER
    state_names = ("state", "goal")

    def __init__(self, *, n_envs: int, n_bits: int = 10, max_episode_steps: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "n_bits", n_bits, POSITIVE_INT)
        if max_episode_steps is not None:
            check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        self.n_envs = int(n_envs)
        self.n_bits = int(n_bits)
        self.max_episode_steps = self.n_bits if max_episode_steps is None else int(max_episode_steps)
        self.device = resolve_device(device)

        # One space object per key: a shared one would be seeded and sampled as one by the Dict.
        self.single_observation_space = spaces.Dict({
            key: spaces.Box(low=0.0, high=1.0, shape=(self.n_bits,), dtype=np.float32)
            for key in ("observation", "achieved_goal", "desired_goal")
        })
        self.single_action_space = spaces.Discrete(self.n_bits)

        self._generator = new_generator(self.device)
        self._bit_index = torch.arange(self.n_bits, device=self.device)
        self._state = torch.zeros((self.n_envs, self.n_bits), dtype=torch.bool, device=self.device)
        self._goal = torch.ones((self.n_envs, self.n_bits), dtype=torch.bool, device=self.device)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = False

    # ----------------------------------------------------------------------------------------------------------------
    # The interface

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        reseed(_OWNER, self._generator, seed)
        self._state = self._draw_states()
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = True
        return self._observe(self._state, self._goal)

    def step(self, actions: torch.Tensor) -> BatchedStep:
        require_reset(_OWNER, self._started)
        check_actions(_OWNER, actions, (self.n_envs,), self.device, integer=True)
        # BitFlippingEnv raises on an index past the end (and NumPy would wrap a negative one): refuse both, rather
        # than flip no bit or the wrong one in silence.
        if bool(((actions < 0) | (actions >= self.n_bits)).any()):
            bad = actions[(actions < 0) | (actions >= self.n_bits)][:5].tolist()
            raise ValueError(f"{_OWNER}.step got actions {bad} outside [0, {self.n_bits}): each action is the index "
                             "of the bit to flip")
        state = self._state ^ (actions[:, None] == self._bit_index)
        elapsed = self._elapsed + 1
        final_obs = self._observe(state, self._goal)

        success = self.compute_terminated(final_obs["achieved_goal"], final_obs["desired_goal"])
        reward = success.to(torch.float32) - 1.0
        terminated = success
        truncated = elapsed >= self.max_episode_steps

        ended = terminated | truncated
        self._state = torch.where(ended[:, None], self._draw_states(), state)
        self._elapsed = elapsed.masked_fill(ended, 0)
        obs = self._observe(self._state, self._goal)
        return BatchedStep(obs, final_obs, reward, terminated, truncated, success.clone())

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """0.0 where the achieved goal equals the desired goal, else -1.0; goals ``(..., n_bits)`` give float32
        rewards ``(...)``."""
        # 0.0 or -1.0 (not -0.0, which negating a 0/1 tensor would give).
        return self.compute_terminated(achieved_goal, desired_goal).to(torch.float32) - 1.0

    def compute_terminated(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """Whether the achieved goal equals the desired goal, which ends the episode; bool, shaped as
        :meth:`compute_reward`. Bits stored as floats read as 1 above 0.5, as in BitFlippingEnv."""
        check_goal_shape(f"{_OWNER}.compute_terminated", achieved_goal, desired_goal, self.n_bits)
        return ((achieved_goal > 0.5) == (desired_goal > 0.5)).all(dim=-1)


    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _draw_states(self) -> torch.Tensor:
        return torch.randint(0, 2, (self.n_envs, self.n_bits), generator=self._generator,
                             device=self.device).bool()

    def _observe(self, state: torch.Tensor, goal: torch.Tensor) -> dict[str, torch.Tensor]:
        bits = state.to(torch.float32)  # a new tensor, so observations never alias the env's state
        return {"observation": bits, "achieved_goal": bits.clone(), "desired_goal": goal.to(torch.float32)}
