"""Exploration noise added to deterministic actions (DDPG, TD3), with Stable-Baselines3's class names.

With several envs each env gets its own draws, and its own state for OU noise, restarted when its
episode ends (what SB3's ``VectorizedActionNoise`` does; here built in).

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

    def follow_seed(self, seed: int) -> None:
        """Restart the generator from a model's seed, leaving the noise unseeded by its user (the next model it is
        given to seeds it again)."""
        self.rng = np.random.default_rng(seed)

    def reset(self, indices: Any = None) -> None:
        """Called when episodes end: for the envs at ``indices`` (all when None). A no-op for memoryless noise."""

    def __call__(self) -> np.ndarray:
        raise NotImplementedError

    def sample(self, n: int) -> np.ndarray:
        """One draw per env, ``(n, *mean.shape)``: independent across envs, each env with its own state.

        The training loop calls this; a subclass that only defines ``__call__`` (as in SB3) draws ``n`` times.
        """
        return np.stack([self() for _ in range(n)])

    def to_json(self) -> dict[str, Any]:
        return {"class": type(self).__name__, "mean": self.mean.tolist(), "sigma": self.sigma.tolist()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean.tolist()}, sigma={self.sigma.tolist()})"


class NormalActionNoise(ActionNoise):
    """Independent Gaussian noise N(mean, sigma²) at every step."""

    def __call__(self) -> np.ndarray:
        return self.rng.normal(self.mean, self.sigma)

    def sample(self, n: int) -> np.ndarray:
        return self.rng.normal(self.mean, self.sigma, size=(n, *self.mean.shape))


class OrnsteinUhlenbeckActionNoise(ActionNoise):
    """Temporally correlated noise, as in the DDPG paper (Lillicrap et al. 2015): dx = theta (mean - x) dt + sigma dW."""

    def __init__(self, mean: Any, sigma: Any, theta: float = 0.15, dt: float = 1e-2, initial_noise: Any = None,
                 *, seed: int | None = None) -> None:
        super().__init__(mean, sigma, seed=seed)
        self.theta = float(theta)
        self.dt = float(dt)
        self.initial_noise = None if initial_noise is None else np.asarray(initial_noise, dtype=np.float64)
        self.reset()

    def reset(self, indices: Any = None) -> None:
        start = self.initial_noise if self.initial_noise is not None else np.zeros_like(self.mean)
        if indices is None or self.noise_prev.shape == self.mean.shape:
            self.noise_prev = np.array(start, dtype=np.float64)  # one state, or every env's
        else:
            self.noise_prev[indices] = start  # (n_envs, ...) states: restart only the envs whose episode ended

    def __call__(self) -> np.ndarray:
        """One draw (SB3's call). Once :meth:`sample` has kept one state per env, this steps them all and returns the first."""
        return self.sample(1)[0] if self.noise_prev.shape == self.mean.shape else self.sample(len(self.noise_prev))[0]

    def sample(self, n: int) -> np.ndarray:
        shape = (n, *self.mean.shape)
        previous = self.noise_prev if self.noise_prev.shape == shape else np.broadcast_to(self.noise_prev, shape)
        noise = (previous + self.theta * (self.mean - previous) * self.dt
                 + self.sigma * np.sqrt(self.dt) * self.rng.normal(size=shape))
        self.noise_prev = noise if n > 1 else noise[0]
        return noise

    def to_json(self) -> dict[str, Any]:
        initial = None if self.initial_noise is None else self.initial_noise.tolist()
        return {**super().to_json(), "theta": self.theta, "dt": self.dt, "initial_noise": initial}


NOISE_CLASSES = {cls.__name__: cls for cls in (NormalActionNoise, OrnsteinUhlenbeckActionNoise)}


def as_action_noise(noise: Any) -> ActionNoise | None:
    """herl's noise for Stable-Baselines3's ``NormalActionNoise`` and ``OrnsteinUhlenbeckActionNoise`` (read by their
    attributes: herl never imports SB3), so that a model saves, loads and seeds it as its own; anything else as given,
    refused unless it is a herl noise."""
    if noise is None or isinstance(noise, ActionNoise):
        return noise
    kind, fields = type(noise).__name__, vars(noise)
    if kind == "NormalActionNoise" and {"_mu", "_sigma"} <= set(fields):
        return NormalActionNoise(fields["_mu"], fields["_sigma"])
    if kind == "OrnsteinUhlenbeckActionNoise" and {"_mu", "_sigma", "_theta", "_dt"} <= set(fields):
        return OrnsteinUhlenbeckActionNoise(fields["_mu"], fields["_sigma"], theta=fields["_theta"], dt=fields["_dt"],
                                            initial_noise=fields.get("initial_noise"))
    raise TypeError(f"action_noise must be a herl.NormalActionNoise or herl.OrnsteinUhlenbeckActionNoise (or SB3's of "
                    f"those names), got {kind}: noises are saved with the model, so herl knows each kind it takes")


def noise_from_json(data: dict[str, Any] | None) -> ActionNoise | None:
    if data is None:
        return None
    kwargs = {k: v for k, v in data.items() if k != "class"}
    try:
        return NOISE_CLASSES[data["class"]](**kwargs)
    except KeyError:
        raise ValueError(f"unknown action noise {data.get('class')!r} in the saved file") from None
