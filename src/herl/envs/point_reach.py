"""PointReach: a point mass moves inside a box towards a goal; a cheap continuous stand-in for FetchReach.

It has FetchReach's shape (continuous actions, a sparse -1/0 reward within a distance threshold, 50-step episodes
that do not end on success) without MuJoCo, so DDPG/TD3/SAC with HER can be tested in seconds.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

# Side in pixels of the ``rgb_array`` rendering, and of the squares drawn for the point and the goal.
_RENDER_SIDE = 64
_RENDER_MARK = 3


class PointReachEnv(gymnasium.Env):
    """Move a point in ``[-1, 1]^dim`` to within ``distance_threshold`` of a goal.

    At each reset the initial position and the goal are drawn uniformly from the box. An action in
    ``[-1, 1]^dim`` (clipped to it) moves the point by ``max_speed * action``; the position is clipped to the box.

    Observations (all ``float32``):

    - ``observation``: position and velocity, shape ``(2 * dim,)``; the velocity is the displacement of the last step
      (zero after reset), so it is in ``[-max_speed, max_speed]``. Position alone would be Markov here; the velocity
      is there so that ``observation`` and ``achieved_goal`` differ in shape and content, which catches code that
      mixes them up;
    - ``achieved_goal``: the position, shape ``(dim,)``;
    - ``desired_goal``: the goal, shape ``(dim,)``.

    The reward is 0.0 when ``||achieved_goal - desired_goal|| <= distance_threshold`` and -1.0 otherwise;
    ``info["is_success"]`` says the same. As in Fetch, success does not end the episode: ``terminated`` is always
    False and the episode is truncated after ``max_episode_steps`` steps.

    Where the step limit lives: constructed directly, the env truncates itself after ``max_episode_steps``.
    ``gym.make("herl/PointReach-v0")`` instead builds it with ``max_episode_steps=None`` and wraps it in gymnasium's
    ``TimeLimit(50)``, so that ``gym.make(..., max_episode_steps=k)`` changes the limit as users expect (gymnasium
    takes that argument for itself; it never reaches the env). Either way the episode is truncated exactly once.

    Args:
        dim: Dimension of the box, the position and the goal.
        max_speed: Largest displacement per step along each axis.
        distance_threshold: Distance to the goal within which the reward is 0.
        max_episode_steps: Steps before the env truncates the episode; None to never truncate (leave it to a
            ``TimeLimit`` wrapper).
        render_mode: ``None``, ``"human"`` (print position and goal) or ``"rgb_array"`` (a 64x64 top view of the
            first two dimensions).
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 20}

    def __init__(
        self,
        *,
        dim: int = 2,
        max_speed: float = 0.1,
        distance_threshold: float = 0.05,
        max_episode_steps: int | None = 50,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        if not max_speed > 0:
            raise ValueError(f"max_speed must be positive, got {max_speed}")
        if not distance_threshold >= 0:
            raise ValueError(f"distance_threshold must be non-negative, got {distance_threshold}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be at least 1 or None, got {max_episode_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")

        self.dim = dim
        self.max_speed = max_speed
        self.distance_threshold = distance_threshold
        self.max_episode_steps = max_episode_steps
        self.render_mode = render_mode

        # float32 copies of the bounds, so clipping keeps values inside the float32 Boxes exactly.
        self._speed = np.float32(max_speed)
        goal_space = spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32)
        speed_bound = np.full(dim, self._speed, dtype=np.float32)
        self.observation_space = spaces.Dict(
            {
                "observation": spaces.Box(
                    low=np.concatenate([goal_space.low, -speed_bound]),
                    high=np.concatenate([goal_space.high, speed_bound]),
                    dtype=np.float32,
                ),
                # Separate objects: a shared space would be seeded and sampled as one by the Dict.
                "achieved_goal": goal_space,
                "desired_goal": spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32),
            }
        )
        self.action_space = spaces.Box(low=-1.0, high=1.0, shape=(dim,), dtype=np.float32)

        self.position: np.ndarray | None = None
        self.velocity = np.zeros(dim, dtype=np.float32)
        self.goal = np.zeros(dim, dtype=np.float32)
        self.current_step = 0

    def _get_obs(self) -> dict[str, np.ndarray]:
        # Fresh arrays: replay buffers keep references, so observations must not alias the env's state.
        assert self.position is not None
        return {
            "observation": np.concatenate([self.position, self.velocity]),
            "achieved_goal": self.position.copy(),
            "desired_goal": self.goal.copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.current_step = 0
        self.position = self.np_random.uniform(-1.0, 1.0, size=self.dim).astype(np.float32)
        self.goal = self.np_random.uniform(-1.0, 1.0, size=self.dim).astype(np.float32)
        self.velocity = np.zeros(self.dim, dtype=np.float32)
        if self.render_mode == "human":
            self.render()
        return self._get_obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.position is None:
            raise RuntimeError("PointReachEnv.step() was called before reset(): call env.reset() first")
        action = np.asarray(action, dtype=np.float32).reshape(self.dim).clip(-1.0, 1.0)
        new_position = (self.position + self._speed * action).clip(-1.0, 1.0)
        # Float rounding can push the difference an ulp past max_speed; clip to stay inside the observation space.
        self.velocity = (new_position - self.position).clip(-self._speed, self._speed)
        self.position = new_position
        self.current_step += 1

        # The same function as compute_reward, so that relabeled rewards match the ones seen in rollouts exactly.
        success = bool(_goal_distance(self.position, self.goal) <= np.float32(self.distance_threshold))
        truncated = self.max_episode_steps is not None and self.current_step >= self.max_episode_steps
        if self.render_mode == "human":
            self.render()
        return self._get_obs(), 0.0 if success else -1.0, False, truncated, {"is_success": success}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Reward of reaching ``achieved_goal`` when ``desired_goal`` was asked: 0.0 within ``distance_threshold``,
        else -1.0.

        Vectorized: goals of shape ``(dim,)`` give a reward of shape ``()``, a batch ``(B, dim)`` gives ``(B,)``.
        ``info`` is unused. Returns ``float32``.
        """
        success = _goal_distance(achieved_goal, desired_goal) <= np.float32(self.distance_threshold)
        return success.astype(np.float32) - np.float32(1.0)

    def compute_terminated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Success never ends an episode here (as in Fetch): all False, shaped as :meth:`compute_reward`."""
        return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)

    def render(self) -> np.ndarray | None:
        """``"rgb_array"``: a ``uint8`` 64x64x3 top view of the first two dimensions (a 1-D env uses a line), the
        goal in green and the point in red. ``"human"``: print position and goal."""
        if self.position is None or self.render_mode is None:
            return None
        if self.render_mode == "human":
            print(f"step {self.current_step}: position {self.position.tolist()} goal {self.goal.tolist()}")
            return None
        image = np.zeros((_RENDER_SIDE, _RENDER_SIDE, 3), dtype=np.uint8)
        for point, colour in ((self.goal, (0, 255, 0)), (self.position, (255, 0, 0))):
            x = point[0]
            y = point[1] if self.dim > 1 else 0.0
            # Map [-1, 1] to pixel indices; row 0 is the top, so y grows upwards.
            col = int(round((x + 1.0) / 2.0 * (_RENDER_SIDE - 1)))
            row = int(round((1.0 - y) / 2.0 * (_RENDER_SIDE - 1)))
            image[
                max(row - _RENDER_MARK, 0) : row + _RENDER_MARK + 1, max(col - _RENDER_MARK, 0) : col + _RENDER_MARK + 1
            ] = colour
        return image


def _goal_distance(achieved_goal: Any, desired_goal: Any) -> np.ndarray:
    """Euclidean distance over the last axis; step() and compute_reward() share it so they agree to the bit, and both
    compare it with the threshold as a float32 (NumPy 1 compared a float32 array with a Python float in float32 but a
    float32 scalar in float64, so one goal and a batch of it got different rewards on the boundary)."""
    difference = np.subtract(achieved_goal, desired_goal, dtype=np.float32)
    return np.sqrt((difference * difference).sum(axis=-1))
