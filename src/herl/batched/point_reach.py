"""PointReach, batched: thousands of point masses moving towards their goals, stepped at once as tensors.

The twin of :class:`herl.envs.PointReachEnv` (same dynamics, spaces, reward, success and time limit, computed in
float32 in the same order, so that both give the same numbers to the bit), for training with many envs on one device.
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
from herl.errors import POSITIVE_INT, ConfigError, check, number

_OWNER = "BatchedPointReach"


class BatchedPointReach(TensorStateEnv):
    """``n_envs`` points in ``[-1, 1]^dim``, each moving to within ``distance_threshold`` of its goal.

    As :class:`herl.envs.PointReachEnv`: at each reset the position and the goal are drawn uniformly from the box; an
    action in ``[-1, 1]^dim`` (clipped to it) moves the point by ``max_speed * action`` and the position is clipped
    to the box. The observation is position and velocity (the last step's displacement, zero after a reset), the
    achieved goal the position, the desired goal the goal, all float32. The reward is 0.0 within
    ``distance_threshold`` of the goal and -1.0 otherwise; success never ends an episode (``terminated`` is always
    False) and every episode is truncated after ``max_episode_steps`` steps, then restarts inside ``step``.

    Random numbers come from one ``torch.Generator`` on ``device``. Every step draws new starts for all envs and keeps
    those of the envs whose episode ended, so the stream does not depend on which envs ended and ``step`` never
    reads a value back from the device.

    Args:
        n_envs: Number of envs stepped together.
        dim: Dimension of the box, the position and the goal.
        max_speed: Largest displacement per step along each axis.
        distance_threshold: Distance to the goal within which the reward is 0 (rounded to float32, as NumPy rounds
            PointReachEnv's Python float threshold when it compares).
        max_episode_steps: Steps before each episode is truncated.
        device: Where the envs' tensors live (``"cpu"``, ``"cuda"``, ...).
    """

    owner = _OWNER
    state_names = ("position", "velocity", "goal")

    def __init__(self, *, n_envs: int, dim: int = 2, max_speed: float = 0.1, distance_threshold: float = 0.05,
                 max_episode_steps: int = 50, device: torch.device | str = "cpu") -> None:
        check(_OWNER, "n_envs", n_envs, POSITIVE_INT)
        check(_OWNER, "dim", dim, POSITIVE_INT)
        check(_OWNER, "max_speed", max_speed, number(0.0, low_open=True))
        check(_OWNER, "distance_threshold", distance_threshold, number(0.0))
        check(_OWNER, "max_episode_steps", max_episode_steps, POSITIVE_INT)
        # The env computes in float32: a speed that float32 rounds to 0 or infinity would stall or break it.
        speed32 = np.float32(max_speed)
        if not 0 < speed32 < np.inf:
            raise ConfigError(_OWNER, "max_speed", max_speed, "a positive number that float32 can hold")

        self.n_envs = int(n_envs)
        self.dim = int(dim)
        self.max_speed = max_speed
        self.distance_threshold = distance_threshold
        self.max_episode_steps = int(max_episode_steps)
        self.device = resolve_device(device)

        # The float32 values of the settings, as Python floats: PointReachEnv computes with a float32 speed, and a
        # Python float that is exactly a float32 gives the same result whether torch computes in float32 or double.
        self._speed = float(speed32)
        self._squared_threshold = _squared_distance_bound(np.float32(distance_threshold))

        # The same spaces as PointReachEnv's, so a model built for one fits the other.
        goal_space = spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32)
        speed_bound = np.full(dim, speed32, dtype=np.float32)
        self.single_observation_space = spaces.Dict({
            "observation": spaces.Box(low=np.concatenate([goal_space.low, -speed_bound]),
                                      high=np.concatenate([goal_space.high, speed_bound]), dtype=np.float32),
            "achieved_goal": goal_space,
            "desired_goal": spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32),
        })
        self.single_action_space = spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32)

        self._generator = new_generator(self.device)
        zeros = torch.zeros((self.n_envs, self.dim), dtype=torch.float32, device=self.device)
        self._position, self._velocity, self._goal = zeros, zeros, zeros
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = False

    # ----------------------------------------------------------------------------------------------------------------
    # The interface

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        reseed(_OWNER, self._generator, seed)
        self._position, self._goal = self._draw_starts()
        self._velocity = torch.zeros_like(self._position)
        self._elapsed = torch.zeros(self.n_envs, dtype=torch.int64, device=self.device)
        self._started = True
        return self._observe(self._position, self._velocity, self._goal)

    def step(self, actions: torch.Tensor) -> BatchedStep:
        require_reset(_OWNER, self._started)
        check_actions(_OWNER, actions, (self.n_envs, self.dim), self.device, integer=False)
        # PointReachEnv's arithmetic, op for op: torch computes each of these in float32 and rounds as NumPy does.
        action = actions.to(torch.float32).clamp(-1.0, 1.0)
        position = (self._position + self._speed * action).clamp(-1.0, 1.0)
        # Float rounding can push the difference an ulp past max_speed; clip to stay inside the observation space.
        velocity = (position - self._position).clamp(-self._speed, self._speed)
        elapsed = self._elapsed + 1
        final_obs = self._observe(position, velocity, self._goal)

        success = self._success(position, self._goal)
        reward = success.to(torch.float32) - 1.0
        terminated = self.compute_terminated(position, self._goal)  # never, unless a subclass ends on success
        truncated = elapsed >= self.max_episode_steps

        # Restart the ended episodes without asking which ones ended (a host read, which waits for the device).
        ended = terminated | truncated
        fresh_position, fresh_goal = self._draw_starts()
        self._position = torch.where(ended[:, None], fresh_position, position)
        self._velocity = velocity.masked_fill(ended[:, None], 0.0)
        self._goal = torch.where(ended[:, None], fresh_goal, self._goal)
        self._elapsed = elapsed.masked_fill(ended, 0)
        obs = self._observe(self._position, self._velocity, self._goal)
        return BatchedStep(obs, final_obs, reward, terminated, truncated, success)

    def compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """0.0 within ``distance_threshold`` of the desired goal, else -1.0; goals ``(..., dim)`` give float32
        rewards ``(...)`` (the function ``step`` uses)."""
        check_goal_shape(f"{_OWNER}.compute_reward", achieved_goal, desired_goal, self.dim)
        return self._success(achieved_goal, desired_goal).to(torch.float32) - 1.0


    # ----------------------------------------------------------------------------------------------------------------
    # Pieces

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Exactly uniform on the float32 grid of [-1, 1): torch.rand gives multiples of 2**-24, which 2x - 1 maps
        # without rounding.
        draws = torch.rand((2, self.n_envs, self.dim), generator=self._generator, device=self.device) * 2.0 - 1.0
        return draws[0], draws[1]

    def _observe(self, position: torch.Tensor, velocity: torch.Tensor, goal: torch.Tensor) -> dict[str, torch.Tensor]:
        # Fresh tensors: buffers keep references, so observations must not alias the env's state.
        return {"observation": torch.cat([position, velocity], dim=1), "achieved_goal": position.clone(),
                "desired_goal": goal.clone()}

    def _success(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        # PointReachEnv's test sqrt(squared distance) <= threshold in float32, without the square root: torch's
        # float32 sqrt is not always correctly rounded (its AVX-512 CPU kernel is an ulp off for ~15% of inputs),
        # NumPy's is, and the bound below makes the comparison exactly NumPy's.
        return _squared_distance(achieved_goal, desired_goal) <= self._squared_threshold


def _squared_distance(achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distance over the last axis, in float32, summing the squares one axis after the other.

    A library reduction (``sum``) may order its additions by the tensor's size, memory layout or device, so the same
    goals could give rewards that differ in ``step`` and in a relabeled batch; a fixed order cannot. It is also
    NumPy's order for up to 8 axes, which PointReachEnv uses.
    """
    difference = achieved_goal.to(torch.float32) - desired_goal.to(torch.float32)
    squares = difference * difference
    total = squares[..., 0]
    for axis in range(1, squares.shape[-1]):
        total = total + squares[..., axis]
    return total


def _squared_distance_bound(threshold: np.float32) -> float:
    """The largest float32 ``s`` whose correctly rounded float32 square root is at most ``threshold``: since the
    square root is monotonic, ``sqrt(s) <= threshold`` exactly when ``s <= bound`` (NaN fails both)."""
    if np.isinf(threshold):
        return float("inf")
    with np.errstate(over="ignore"):  # a threshold past 1.8e19 squares to infinity; the search steps back from it
        bound = np.float32(threshold * threshold)
        while np.sqrt(bound) > threshold:
            bound = np.nextafter(bound, np.float32(-np.inf))
        while np.sqrt(np.nextafter(bound, np.float32(np.inf))) <= threshold:
            bound = np.nextafter(bound, np.float32(np.inf))
    return float(bound)
