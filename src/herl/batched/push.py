"""Push, batched: thousands of pushers moving pucks to goals in the plane, stepped at once as tensors.

The HER setting of Fetch's push without a physics engine: the agent moves a pusher, and the goal is for an object it
can only move by touching it, so the achieved goal (the puck's position) stays where it is until the agent learns to
reach the puck. Contacts are kinematic: a pusher that comes within ``contact_radius`` of the puck's centre moves the
puck straight away from it, out to that distance.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from herl.batched.env import (BatchedStep, TensorStateEnv, check_actions, check_goal_shape, new_generator,
                              require_reset, reseed, resolve_device)
from herl.errors import POSITIVE_INT, check, number

_OWNER = "BatchedPush"
_EPS = 1e-6


class BatchedPush(TensorStateEnv):
    """``n_envs`` pushers in the square ``[-1, 1]^2``, each pushing a puck to within ``distance_threshold`` of its goal.

    At each reset the pusher is drawn uniformly from the square, and the puck and the goal from ``[-0.6, 0.6]^2``. An
    action in ``[-1, 1]^2`` (clipped to it) moves the pusher by ``max_speed * action``, clipped to the square. If the
    pusher then lies within ``contact_radius`` of the puck's centre, the puck moves along the line from the pusher
    through its centre to ``contact_radius`` from the pusher (along the action when the two coincide), clipped to
    the square. The observation is the pusher's position, the puck's, the puck relative to the pusher and the
    pusher's velocity (its last displacement); the achieved goal is the puck's position, the desired goal the goal.
    The reward is 0.0 with the puck within ``distance_threshold`` of the goal and -1.0 otherwise; success never ends an
    episode, and every episode is truncated after ``max_episode_steps`` steps, then restarts inside ``step``.

    Random numbers come from one ``torch.Generator`` on ``device``; every step draws new starts for all envs and keeps
    those of the envs whose episode ended, so ``step`` never reads a value back from the device.

    Args:
        n_envs: Number of envs stepped together.
        max_speed: Largest displacement of the pusher per step along each axis.
        contact_radius: Distance between the pusher's and the puck's centres at which they touch.
        distance_threshold: Distance of the puck to the goal within which the reward is 0.
        max_episode_steps: Steps before each episode is truncated.
        device: Where the envs' tensors live (``"cpu"``, ``"cuda"``, ...).
    """

    owner = _OWNER
    state_names = ("pusher", "puck", "velocity", "goal")

    def __init__(self, *, n_envs: int, max_speed: float = 0.1, contact_radius: float = 0.1,
                 distance_threshold: float = 0.05, max_episode_steps: int = 50,
                 device: torch.device | str = "cpu") -> None:
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "max_speed", max_speed, number(0.0, 1.0, low_open=True))
        check(_OWNER, "contact_radius", contact_radius, number(0.0, 1.0, low_open=True))
        check(_OWNER, "distance_threshold", distance_threshold, number(0.0))
        check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        self.n_envs = int(n_envs)
        self.dim = 2  # of the pusher's moves (the action), the puck's place and the goal
        self.max_speed = float(max_speed)
        self.contact_radius = float(contact_radius)
        self.distance_threshold = float(distance_threshold)
        self.max_episode_steps = int(max_episode_steps)
        self.device = resolve_device(device)

        box = spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)
        speed = np.full(2, np.float32(max_speed), dtype=np.float32)
        self.single_observation_space = spaces.Dict({
            "observation": spaces.Box(low=np.concatenate([-np.ones(4), -2 * np.ones(2), -speed]).astype(np.float32),
                                      high=np.concatenate([np.ones(4), 2 * np.ones(2), speed]).astype(np.float32),
                                      dtype=np.float32),
            "achieved_goal": box,
            "desired_goal": spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32),
        })
        self.single_action_space = spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)

        self._generator = new_generator(self.device)
        zeros = torch.zeros((self.n_envs, 2), dtype=torch.float32, device=self.device)
        self._pusher, self._puck, self._velocity, self._goal = zeros, zeros, zeros, zeros
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = False

    # ----------------------------------------------------------------------------------------------------------------
    # The interface

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        reseed(_OWNER, self._generator, seed)
        self._pusher, self._puck, self._goal = self._draw_starts()
        self._velocity = torch.zeros_like(self._pusher)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = True
        return self._observe(self._pusher, self._puck, self._velocity, self._goal)

    def step(self, actions: torch.Tensor) -> BatchedStep:
        require_reset(_OWNER, self._started)
        check_actions(_OWNER, actions, (self.n_envs, 2), self.device, integer=False)
        action = actions.to(torch.float32).clamp(-1.0, 1.0)
        pusher = (self._pusher + self.max_speed * action).clamp(-1.0, 1.0)
        velocity = (pusher - self._pusher).clamp(-self.max_speed, self.max_speed)
        puck = self._pushed(pusher, self._puck, action)
        elapsed = self._elapsed + 1
        final_obs = self._observe(pusher, puck, velocity, self._goal)

        success = self._success(puck, self._goal)
        reward = success.to(torch.float32) - 1.0
        terminated = torch.zeros_like(success)
        truncated = elapsed >= self.max_episode_steps

        ended = truncated
        fresh_pusher, fresh_puck, fresh_goal = self._draw_starts()
        self._pusher = torch.where(ended[:, None], fresh_pusher, pusher)
        self._puck = torch.where(ended[:, None], fresh_puck, puck)
        self._goal = torch.where(ended[:, None], fresh_goal, self._goal)
        self._velocity = velocity.masked_fill(ended[:, None], 0.0)
        self._elapsed = elapsed.masked_fill(ended, 0)
        obs = self._observe(self._pusher, self._puck, self._velocity, self._goal)
        return BatchedStep(obs, final_obs, reward, terminated, truncated, success)

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """0.0 with the puck within ``distance_threshold`` of the desired goal, else -1.0; goals ``(..., 2)`` give
        float32 rewards ``(...)`` (the function ``step`` uses)."""
        check_goal_shape(f"{_OWNER}.compute_reward", achieved_goal, desired_goal, 2)
        return self._success(achieved_goal, desired_goal).to(torch.float32) - 1.0

    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _pushed(self, pusher: torch.Tensor, puck: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Where the puck goes when the pusher has moved to ``pusher``: out to ``contact_radius`` along the line from
        the pusher through the puck's centre if it is closer than that, else nowhere."""
        offset = puck - pusher
        squared = (offset * offset).sum(dim=1, keepdim=True)
        along_action = action / (action * action).sum(dim=1, keepdim=True).sqrt().clamp_min(_EPS)
        direction = torch.where(squared > _EPS * _EPS, offset / squared.sqrt().clamp_min(_EPS), along_action)
        touching = squared < self.contact_radius * self.contact_radius
        return torch.where(touching, (pusher + self.contact_radius * direction).clamp(-1.0, 1.0), puck)

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        draws = torch.rand((3, self.n_envs, 2), generator=self._generator, device=self.device) * 2.0 - 1.0
        return draws[0], 0.6 * draws[1], 0.6 * draws[2]

    def _observe(self, pusher: torch.Tensor, puck: torch.Tensor, velocity: torch.Tensor,
                 goal: torch.Tensor) -> dict[str, torch.Tensor]:
        # Fresh tensors: buffers keep references, so observations must not alias the env's state.
        return {"observation": torch.cat([pusher, puck, puck - pusher, velocity], dim=1),
                "achieved_goal": puck.clone(), "desired_goal": goal.clone()}

    def _success(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        difference = achieved_goal.to(torch.float32) - desired_goal.to(torch.float32)
        squared = difference[..., 0] * difference[..., 0] + difference[..., 1] * difference[..., 1]
        return squared <= self.distance_threshold * self.distance_threshold
