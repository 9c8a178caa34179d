"""Deep Deterministic Policy Gradient (Lillicrap et al. 2015, arXiv:1509.02971), the algorithm of
the HER paper's robotics experiments.

As in Stable-Baselines3, DDPG is TD3 with one critic, no delay and no target policy smoothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from herl.algorithms.td3 import TD3, TD3Config


@dataclass(frozen=True)
class DDPGConfig(TD3Config):
    """DDPG's hyperparameters: TD3's, with its tricks off."""

    policy_delay: int = 1
    """The actor updates with every critic update."""
    target_policy_noise: float = 0.0
    """No target policy smoothing."""
    target_noise_clip: float = 0.0
    """Unused without target noise."""


class DDPG(TD3):
    """DDPG for Box action spaces (one critic by default: ``policy_kwargs=dict(n_critics=1)``)."""

    config_class = DDPGConfig
    default_n_critics = 1
