"""Exploration noise added to deterministic actions (DDPG, TD3), with Stable-Baselines3's class names.

Noise is drawn in the policy's action scale ([-1, 1]) and the noisy action is clipped there, as SB3 does.
Each noise object draws from its own ``np.random.Generator``; an algorithm seeds it from its own seed
with :meth:`ActionNoise.seed` unless the noise was given one.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ActionNoise:
    """Base class: ``noise()`` returns one draw shaped like ``mean``."""

    def __init__(self, mean: Any, sigma: Any, *, seed: int | None = None) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.sigma = np.asarray(sigma, dtype=np.float64)
        if self.mean.shape != self.sigma.shape:
            raise ValueError(f"mean has shape {self.mean.shape} but sigma {self.sigma.shape}: give one value per action dimension")
        self.seeded = seed is not None
        self.rng = np.random.default_rng(seed)

    def seed(self, seed: int | None) -> None:
        """Restart the noise's generator from ``seed``."""
        self.rng = np.random.default_rng(seed)
        self.seeded = seed is not None

    def reset(self) -> None:
        """Called at the start of every episode (a no-op for memoryless noise)."""

    def __call__(self) -> np.ndarray:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        return {"class": type(self).__name__, "mean": self.mean.tolist(), "sigma": self.sigma.tolist()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean.tolist()}, sigma={self.sigma.tolist()})"


class NormalActionNoise(ActionNoise):
    """Independent Gaussian noise N(mean, sigma²) at every step."""

    def __call__(self) -> np.ndarray:
        return self.rng.normal(self.mean, self.sigma)


class OrnsteinUhlenbeckActionNoise(ActionNoise):
    """Temporally correlated noise, as in the DDPG paper (Lillicrap et al. 2015): dx = theta (mean - x) dt + sigma dW."""

    def __init__(self, mean: Any, sigma: Any, theta: float = 0.15, dt: float = 1e-2, initial_noise: Any = None,
                 *, seed: int | None = None) -> None:
        super().__init__(mean, sigma, seed=seed)
        self.theta = float(theta)
        self.dt = float(dt)
        self.initial_noise = None if initial_noise is None else np.asarray(initial_noise, dtype=np.float64)
        self.reset()

    def reset(self) -> None:
        self.noise_prev = self.initial_noise if self.initial_noise is not None else np.zeros_like(self.mean)

    def __call__(self) -> np.ndarray:
        noise = (self.noise_prev + self.theta * (self.mean - self.noise_prev) * self.dt
                 + self.sigma * np.sqrt(self.dt) * self.rng.normal(size=self.mean.shape))
        self.noise_prev = noise
        return noise

    def to_json(self) -> dict[str, Any]:
        initial = None if self.initial_noise is None else self.initial_noise.tolist()
        return {**super().to_json(), "theta": self.theta, "dt": self.dt, "initial_noise": initial}


NOISE_CLASSES = {cls.__name__: cls for cls in (NormalActionNoise, OrnsteinUhlenbeckActionNoise)}


def noise_from_json(data: dict[str, Any] | None) -> ActionNoise | None:
    if data is None:
        return None
    kwargs = {k: v for k, v in data.items() if k != "class"}
    try:
        return NOISE_CLASSES[data["class"]](**kwargs)
    except KeyError:
        raise ValueError(f"unknown action noise {data.get('class')!r} in the saved file") from None
