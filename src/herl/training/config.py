"""Hyperparameters as frozen dataclasses: the shared off-policy ones here, each algorithm's own in its file.

Users pass them as keyword arguments with Stable-Baselines3's names (``SAC(..., learning_rate=1e-3)``);
the model keeps them as a frozen config, saved as JSON with the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from herl.nn.mlp import ACTIVATIONS


SDE_REFUSAL = (
    "use_sde=True (gSDE, generalized state-dependent exploration) is not implemented in herl: leave it False (SB3's "
    "default; SAC then explores with its own Gaussian policy); for smoother, temporally correlated exploration use TD3 "
    "or DDPG with action_noise=OrnsteinUhlenbeckActionNoise(...), and for more exploration random_action_prob=p"
)


@dataclass(frozen=True)
class OffPolicyConfig:
    """Hyperparameters every off-policy algorithm shares."""

    learning_rate: float = 3e-4
    """Adam's step size for every network (a float: schedules are not supported)."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer holds."""
    learning_starts: int = 100
    """Env steps of uniformly random actions before the first update."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Polyak coefficient of the target networks (1.0: hard copy)."""
    gamma: float = 0.99
    """Discount factor."""
    train_freq: tuple[int, str] = (1, "step")
    """Update after this many env steps (``(n, "step")``, or an int) or episodes (``(n, "episode")``)."""
    gradient_steps: int = 1
    """Gradient steps after each collection; -1: as many as env steps collected."""
    normalize_observations: bool | None = None
    """Running mean/std normalization of the network inputs; None: on for goal envs, off otherwise."""
    clip_observations: float = 5.0
    """Normalized inputs are clipped to ``±clip_observations`` (HER's baselines use 5)."""
    clip_target: bool | tuple[float, float] = False
    """Clip TD targets: True for [-1/(1-gamma), 0] (the range of returns of -1/0 goal rewards), or (low, high)."""
    stats_window_size: int = 100
    """Episodes averaged in ``rollout/ep_rew_mean`` and ``rollout/success_rate``."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> OffPolicyConfig:
        """Build from keyword arguments, with errors that name the unknown ones and the known ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"{cls.__name__[:-6] or cls.__name__} got unknown argument(s) {unknown}; known hyperparameters: {sorted(names)}")
        values = dict(kwargs)
        if "train_freq" in values:
            values["train_freq"] = _train_freq(values["train_freq"])
        if isinstance(values.get("clip_target"), list):
            values["clip_target"] = tuple(values["clip_target"])
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if callable(self.learning_rate) or not isinstance(self.learning_rate, (int, float)) or self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be a positive number (schedules are not supported), got {self.learning_rate!r}")
        for name in ("buffer_size", "batch_size"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.gradient_steps < -1:
            raise ValueError(f"gradient_steps must be >= 0, or -1 for as many as env steps, got {self.gradient_steps}")

    def target_bounds(self) -> tuple[float, float] | None:
        """The (low, high) clipping range of TD targets, or None."""
        if self.clip_target is True:
            return (-1.0 / (1.0 - self.gamma) if self.gamma < 1 else float("-inf"), 0.0)
        if self.clip_target is False or self.clip_target is None:
            return None
        low, high = self.clip_target
        return float(low), float(high)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _train_freq(value: Any) -> tuple[int, str]:
    if isinstance(value, int):
        return (value, "step")
    n, unit = value
    if unit not in ("step", "episode"):
        raise ValueError(f"train_freq's unit must be 'step' or 'episode', got {unit!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"train_freq must be a positive integer, got {n!r}")
    return (int(n), unit)


@dataclass(frozen=True)
class PolicyConfig:
    """The networks' shape, from SB3's ``policy_kwargs``."""

    actor_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of the actor (``net_arch=dict(pi=[...])``)."""
    critic_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of each critic or Q-network (``net_arch=dict(qf=[...])``)."""
    activation: str = "relu"
    """Activation between layers: a name, or ``activation_fn=nn.ReLU`` etc."""
    n_critics: int = 2
    """Critics in the ensemble (TD3/SAC's clipped double Q uses 2)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The algorithm's own policy kwargs (TQC's ``n_quantiles``, CrossQ's batch renormalization settings),
    with its defaults filled in."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None, default_arch: Sequence[int] | Mapping[str, Sequence[int]],
                    default_n_critics: int = 2, option_defaults: Mapping[str, Any] | None = None) -> PolicyConfig:
        """``option_defaults``: the policy kwargs an algorithm reads beyond the shared ones, with their defaults
        (their types are checked against the defaults')."""
        kwargs = dict(kwargs or {})
        option_defaults = dict(option_defaults or {})
        options = {}
        for name, default in option_defaults.items():
            value = kwargs.pop(name, default)
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError(f"policy_kwargs {name} must be True or False, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(default, int) and int(value) != value):
                kind = "an integer" if isinstance(default, int) else "a number"
                raise TypeError(f"policy_kwargs {name} must be {kind}, got {value!r}")
            options[name] = type(default)(value)
        if isinstance(default_arch, Mapping):
            default_actor, default_critic = default_arch["pi"], default_arch["qf"]
        else:
            default_actor = default_critic = default_arch
        arch = kwargs.pop("net_arch", None)
        if arch is None:
            actor, critic = default_actor, default_critic
        elif isinstance(arch, Mapping):
            actor, critic = arch.get("pi", default_actor), arch.get("qf", arch.get("q", default_critic))
        else:
            actor = critic = arch
        activation = kwargs.pop("activation_fn", kwargs.pop("activation", "relu"))
        if isinstance(activation, type) and issubclass(activation, nn.Module):
            names = {v: k for k, v in ACTIVATIONS.items()}
            if activation not in names:
                raise ValueError(f"activation_fn {activation.__name__} is not supported: use one of {sorted(ACTIVATIONS)}")
            activation = names[activation]
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}: use one of {sorted(ACTIVATIONS)}")
        n_critics = int(kwargs.pop("n_critics", default_n_critics))
        if kwargs.pop("use_sde", False):  # SB3 writes use_sde=False into policy_kwargs; only True is unsupported
            raise ValueError(SDE_REFUSAL)
        if kwargs:
            known = ["net_arch", "activation_fn", "n_critics", *option_defaults]
            raise TypeError(f"unsupported policy_kwargs {sorted(kwargs)}: this algorithm reads {', '.join(known)}")
        return cls(tuple(int(x) for x in actor), tuple(int(x) for x in critic), activation, n_critics, options)

    def to_policy_kwargs(self) -> dict[str, Any]:
        return {"net_arch": {"pi": list(self.actor_arch), "qf": list(self.critic_arch)},
                "activation_fn": self.activation, "n_critics": self.n_critics, **self.options}

