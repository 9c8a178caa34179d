"""The bit-flipping environment: the smallest problem on which HER makes the difference.

Andrychowicz et al. (2017), "Hindsight Experience Replay", section 3.1: the state is a vector of ``n`` bits, each
action flips one bit, and the reward is -1 until the state equals the goal. With ``n`` beyond ~15 a random policy
essentially never sees a reward of 0, so plain DQN fails and DQN with HER succeeds.

By default this follows Stable-Baselines3's ``BitFlippingEnv`` (random initial state, goal fixed to all ones, episodes
truncated after ``n_bits`` steps), so results compare one to one with SB3's HER tests. ``random_goal=True`` gives the
paper's version, where the goal is drawn at random at every reset.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

# SB3's image encoding: the bits are the first pixels of a 36x36 greyscale image, the rest is black.
_IMAGE_SIDE = 36
# Discrete(2**n_bits) holds its size in an int64, so the integer encoding stops at 62 bits.
_MAX_DISCRETE_BITS = 62
# Side in pixels of one bit in the ``rgb_array`` rendering.
_RENDER_CELL = 8

_OBS_KEYS = ("observation", "achieved_goal", "desired_goal")


class BitFlippingEnv(gymnasium.Env):
    """Flip bits until the state equals the goal.

    Observations are a dict with the keys ``observation``, ``achieved_goal`` (both the current state) and
    ``desired_goal``. Three encodings of a bit vector are offered:

    - default: ``MultiBinary(n_bits)``, an ``int8`` array of 0s and 1s;
    - ``discrete_obs_space=True``: ``Discrete(2**n_bits)``, the integer whose bit ``i`` is bit ``i`` of the state
      (a Python ``int``; at most 62 bits);
    - ``image_obs_space=True``: a ``uint8`` greyscale image of shape ``(1, 36, 36)`` (``(36, 36, 1)`` when
      ``channel_first=False``) whose first ``n_bits`` pixels in C order are 255 for a 1 bit and 0 for a 0 bit.

    Actions are ``Discrete(n_bits)`` (flip bit ``action``) or, with ``continuous=True``, ``Box(-1, 1, (n_bits,))``
    where every bit ``i`` with ``action[i] > 0`` is flipped.

    The reward is 0.0 when the state equals the goal and -1.0 otherwise. The episode is terminated on success and
    truncated (never terminated) after ``max_steps`` steps; on the step where both happen both flags are True.
    ``info["is_success"]`` is set on every step.

    Args:
        n_bits: Number of bits of the state and the goal.
        continuous: Use the ``Box`` action space instead of ``Discrete(n_bits)``.
        max_steps: Steps before the episode is truncated; defaults to ``n_bits`` (the fewest that always suffice).
        discrete_obs_space: Encode observations and goals as integers.
        image_obs_space: Encode observations and goals as greyscale images.
        channel_first: Image layout ``(1, 36, 36)`` when True, ``(36, 36, 1)`` when False.
        render_mode: ``None``, ``"human"`` (print the state and goal) or ``"rgb_array"`` (return an image).
        random_goal: Draw the goal uniformly from ``{0, 1}^n_bits`` at every reset (the HER paper's version) instead
            of fixing it to all ones (SB3's version).
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        n_bits: int = 10,
        *,
        continuous: bool = False,
        max_steps: int | None = None,
        discrete_obs_space: bool = False,
        image_obs_space: bool = False,
        channel_first: bool = True,
        render_mode: str | None = None,
        random_goal: bool = False,
    ) -> None:
        super().__init__()
        if n_bits < 1:
            raise ValueError(f"n_bits must be at least 1, got {n_bits}")
        if discrete_obs_space and image_obs_space:
            raise ValueError("discrete_obs_space and image_obs_space cannot both be True: choose one encoding")
        if discrete_obs_space and n_bits > _MAX_DISCRETE_BITS:
            raise ValueError(
                f"discrete_obs_space supports at most {_MAX_DISCRETE_BITS} bits (Discrete(2**n_bits) must fit in an "
                f"int64), got n_bits={n_bits}: use the default MultiBinary encoding for more bits"
            )
        if image_obs_space and n_bits > _IMAGE_SIDE * _IMAGE_SIDE:
            raise ValueError(
                f"image_obs_space supports at most {_IMAGE_SIDE * _IMAGE_SIDE} bits, got n_bits={n_bits}"
            )
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (or None for n_bits), got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")

        self.n_bits = n_bits
        self.continuous = continuous
        self.max_steps = n_bits if max_steps is None else max_steps
        self.discrete_obs_space = discrete_obs_space
        self.image_obs_space = image_obs_space
        self.channel_first = channel_first
        self.render_mode = render_mode
        self.random_goal = random_goal
        self.image_shape = (1, _IMAGE_SIDE, _IMAGE_SIDE) if channel_first else (_IMAGE_SIDE, _IMAGE_SIDE, 1)

        # One space object per key: a shared one would be seeded and sampled as one by the Dict.
        self.observation_space = spaces.Dict({key: self._make_goal_space() for key in _OBS_KEYS})
        if continuous:
            self.action_space = spaces.Box(low=-1.0, high=1.0, shape=(n_bits,), dtype=np.float32)
        else:
            self.action_space = spaces.Discrete(n_bits)

        # Bit i of the integer encoding has weight 2**i (SB3's convention).
        self._bit_positions = np.arange(n_bits, dtype=np.int64)
        # The state exists only after reset(); step() checks for None to give a clear error.
        self.state: np.ndarray | None = None
        self.goal: np.ndarray = np.ones(n_bits, dtype=np.int8)
        self.current_step = 0

    # ----------------------------------------------------------------------------------------------------------------
    # Encodings

    def _make_goal_space(self) -> spaces.Space:
        if self.discrete_obs_space:
            return spaces.Discrete(2**self.n_bits)
        if self.image_obs_space:
            return spaces.Box(low=0, high=255, shape=self.image_shape, dtype=np.uint8)
        return spaces.MultiBinary(self.n_bits)

    def encode(self, bits: np.ndarray) -> int | np.ndarray:
        """Encode one bit vector (shape ``(n_bits,)``) the way observations are returned."""
        bits = np.asarray(bits, dtype=np.int8)
        if self.discrete_obs_space:
            return int(np.sum(bits.astype(np.int64) << self._bit_positions))
        if self.image_obs_space:
            pixels = np.zeros(_IMAGE_SIDE * _IMAGE_SIDE, dtype=np.uint8)
            pixels[: self.n_bits] = bits.astype(np.uint8) * 255
            return pixels.reshape(self.image_shape)
        return bits.copy()

    def decode(self, goals: Any) -> np.ndarray:
        """Decode goals in this env's encoding to bit vectors.

        Accepts one goal or a batch with any leading axes and returns ``int8`` bits of shape ``(*batch, n_bits)``.
        Integer goals may carry a trailing axis of size 1 (``(B, 1)``), as replay buffers often store ``Discrete``
        values. Bit vectors may be stored as floats; values above 0.5 read as 1.
        """
        goals = np.asarray(goals)
        if self.discrete_obs_space:
            codes = goals.astype(np.int64)
            if codes.ndim >= 2 and codes.shape[-1] == 1:
                codes = codes[..., 0]
            return ((codes[..., None] >> self._bit_positions) & 1).astype(np.int8)
        if self.image_obs_space:
            if goals.shape[-3:] != self.image_shape:
                raise ValueError(f"image goals must end with shape {self.image_shape}, got shape {goals.shape}")
            flat = goals.reshape(goals.shape[:-3] + (-1,))
            return (flat[..., : self.n_bits] > 127).astype(np.int8)
        if goals.ndim == 0 or goals.shape[-1] != self.n_bits:
            raise ValueError(f"bit-vector goals must end with an axis of size n_bits={self.n_bits}, got {goals.shape}")
        return (goals > 0.5).astype(np.int8)

    def _get_obs(self) -> dict[str, int | np.ndarray]:
        # Every value is a fresh object: replay buffers keep references, so they must not alias self.state.
        assert self.state is not None
        return {
            "observation": self.encode(self.state),
            "achieved_goal": self.encode(self.state),
            "desired_goal": self.encode(self.goal),
        }

    # ----------------------------------------------------------------------------------------------------------------
    # Gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, int | np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.current_step = 0
        # SB3 starts from a random state too (not all zeros), so an episode may begin at the goal.
        self.state = self.np_random.integers(0, 2, size=self.n_bits, dtype=np.int8)
        if self.random_goal:
            # The paper draws state and goal independently; no redraw when they coincide.
            self.goal = self.np_random.integers(0, 2, size=self.n_bits, dtype=np.int8)
        if self.render_mode == "human":
            self.render()
        return self._get_obs(), {}

    def step(self, action: int | np.ndarray) -> tuple[dict[str, int | np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.state is None:
            raise RuntimeError("BitFlippingEnv.step() was called before reset(): call env.reset() first")
        if self.continuous:
            flip = np.asarray(action).reshape(self.n_bits) > 0
            self.state[flip] ^= 1
        else:
            self.state[int(np.asarray(action).item())] ^= 1
        self.current_step += 1

        success = bool(np.array_equal(self.state, self.goal))
        reward = 0.0 if success else -1.0
        truncated = self.current_step >= self.max_steps
        if self.render_mode == "human":
            self.render()
        return self._get_obs(), reward, success, truncated, {"is_success": success}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Reward of reaching ``achieved_goal`` when ``desired_goal`` was asked: 0.0 if equal, else -1.0.

        Vectorized: goals in this env's encoding, one (reward of shape ``()``) or a batch with leading axes (rewards
        of shape ``(B,)``). ``info`` is unused. Returns ``float32``.
        """
        success = self.compute_terminated(achieved_goal, desired_goal, info)
        # 0.0 or -1.0 (not -0.0, which negating a 0/1 array would give).
        return success.astype(np.float32) - np.float32(1.0)

    def compute_terminated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Whether reaching ``achieved_goal`` ends the episode, that is equals ``desired_goal``; vectorized as
        :meth:`compute_reward`, returns ``bool``."""
        return np.all(self.decode(achieved_goal) == self.decode(desired_goal), axis=-1)

    def compute_truncated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Goals never truncate an episode (only the step limit does): all False, shaped as :meth:`compute_reward`."""
        return np.zeros_like(self.compute_terminated(achieved_goal, desired_goal, info))

    def render(self) -> np.ndarray | None:
        """``"rgb_array"``: a ``uint8`` image of shape ``(16, 8 * n_bits, 3)``, the state above the goal, 1 bits
        white and 0 bits black. ``"human"``: print the state and goal."""
        if self.state is None or self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            rows = np.stack([self.state, self.goal]).astype(np.uint8) * 255
            image = np.kron(rows, np.ones((_RENDER_CELL, _RENDER_CELL), dtype=np.uint8))
            return np.repeat(image[:, :, None], 3, axis=2)
        print(f"step {self.current_step}: state {self.state.tolist()} goal {self.goal.tolist()}")
        return None
