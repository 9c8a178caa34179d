"""Observation encoding, actors and critics shared by herl's algorithms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from herl.nn.acting import ActingNetwork
from herl.nn.extractors import ReadsFeatures
from herl.nn.mlp import MLP
from herl.nn.normalizer import RunningNormalizer

# Which observation entries the networks read. Every entry of a Dict observation, as SB3's MultiInputPolicy: an
# env may keep part of the state in achieved_goal alone (AntMaze's position is not in its observation). OpenAI
# baselines fed a goal policy the observation and the desired goal only (achieved_goal is a function of the state
# there): policy_kwargs input_keys chooses so, and models saved before input_keys existed read that way.


def input_keys(observation_space: spaces.Space, chosen: Sequence[str] | None = None) -> tuple[str, ...]:
    """Which observation entries the networks read, in order: ``chosen`` (checked against a Dict space's keys), else
    every key of a Dict space (sorted, as gymnasium's Dict holds them), or the whole flat observation (``"obs"``)."""
    if not isinstance(observation_space, spaces.Dict):
        if chosen is not None:
            raise ValueError(f"policy_kwargs input_keys={list(chosen)} chooses entries of a Dict observation; this "
                             f"env's observation space is {observation_space}: leave input_keys out")
        return ("obs",)
    if chosen is None:
        return tuple(sorted(observation_space.spaces))
    chosen = tuple(chosen)
    unknown = [k for k in chosen if k not in observation_space.spaces]
    if not chosen or unknown or len(set(chosen)) != len(chosen):
        raise ValueError(f"policy_kwargs input_keys={list(chosen)}: give distinct keys of the observation, which has "
                         f"{sorted(observation_space.spaces)}" + (f" (not {unknown})" if unknown else ""))
    return chosen


def _flat_size(space: spaces.Space, key: str) -> int:
    if isinstance(space, spaces.Discrete):
        return 1
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return int(np.prod(space.shape))
    entry = f"the observation's entry {key!r} is" if key != "obs" else "the observation space is"
    raise TypeError(f"{entry} {space}, unsupported: use Box, Discrete, MultiBinary or MultiDiscrete entries (give "
                    "a nested dict's parts entries of their own)")


class ObservationEncoder(nn.Module):
    """Dict (or flat) observations to one float vector per row, optionally normalized by running statistics.

    Discrete entries are read as their integer value (normalization then scales them).
    """

    def __init__(self, observation_space: spaces.Space, *, normalize: bool, clip_range: float = 5.0,
                 keys: Sequence[str] | None = None) -> None:
        super().__init__()
        self.keys = input_keys(observation_space, keys)
        subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"obs": observation_space}
        self.dim = sum(_flat_size(subspaces[k], k) for k in self.keys)
        self.dict_obs = isinstance(observation_space, spaces.Dict)
        self.normalizer = RunningNormalizer(self.dim, clip_range=clip_range) if normalize else None

    def flatten(self, obs: Mapping[str, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """Batch of tensors (a dict, or a tensor for flat spaces) to ``(batch, dim)`` float32, unnormalized."""
        if not self.dict_obs:
            return obs.reshape(obs.shape[0], -1).float()
        parts = [obs[k].reshape(obs[k].shape[0], -1) for k in self.keys]
        return torch.cat(parts, dim=1).float() if len(parts) > 1 else parts[0].float()

    def flatten_numpy(self, obs: Any, device: torch.device) -> torch.Tensor:
        """Observations as the env gives them, with a leading batch axis, to a ``(batch, dim)`` tensor."""
        if not self.dict_obs:
            array = np.asarray(obs, dtype=np.float32)
            return torch.from_numpy(array.reshape(array.shape[0], -1)).to(device)
        parts = [np.asarray(obs[k], dtype=np.float32) for k in self.keys]
        array = np.concatenate([p.reshape(p.shape[0], -1) for p in parts], axis=1)
        return torch.from_numpy(array).to(device)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.normalizer is None else self.normalizer(x)

    def update(self, x: torch.Tensor) -> None:
        if self.normalizer is not None:
            self.normalizer.update(x)


# SB3's bounds on the log standard deviation of SAC's Gaussian
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class SquashedGaussianActor(ReadsFeatures, ActingNetwork, nn.Module):
    """SAC's policy: a Gaussian over pre-squash actions, squashed into [-1, 1] by tanh (Haarnoja et al. 2018, app. C)."""

    def __init__(self, in_dim: int, action_dim: int, hidden: Sequence[int], *, activation: Any = "relu",
                 generator: torch.Generator | None = None, net: nn.Module | None = None, squash_eps: float = 0.0,
                 layer_norm: bool = False) -> None:
        """``net``: the network from inputs to the Gaussian's means and log standard deviations (``2 *
        action_dim`` outputs) instead of an :class:`MLP` (CrossQ's has batch renormalization).
        ``squash_eps``: see :attr:`herl.algorithms.sac.SACConfig.squash_eps`."""
        super().__init__()
        self.net = net if net is not None else MLP(in_dim, 2 * action_dim, hidden, activation=activation, generator=generator,
                                                   layer_norm=layer_norm)
        self.squash_eps = float(squash_eps)

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions for ``x`` and their log-probabilities ``(batch, 1)``; ``noise=None`` gives the mean action."""
        mean, log_std = self.net(self.features(x)).chunk(2, dim=-1)
        if noise is None:
            return torch.tanh(mean), torch.zeros_like(mean[:, :1])
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        pre_tanh = mean + log_std.exp() * noise
        # log N(u; mean, std) - log|d tanh(u)/du|, with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), the
        # stable exact form; or SB3's log(1 - tanh(u)^2 + eps), which never goes below log(eps)
        log_prob = -0.5 * noise.square() - log_std - _HALF_LOG_2PI
        action = torch.tanh(pre_tanh)
        if self.squash_eps > 0:
            log_prob = log_prob - torch.log(1.0 - action.square() + self.squash_eps)
        else:
            log_prob = log_prob - 2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))
        return action, log_prob.sum(dim=-1, keepdim=True)


class DeterministicActor(ReadsFeatures, ActingNetwork, nn.Module):
    """DDPG/TD3's policy: an MLP with tanh output in [-1, 1]."""

    def __init__(self, in_dim: int, action_dim: int, hidden: Sequence[int], *, activation: Any = "relu",
                 generator: torch.Generator | None = None, layer_norm: bool = False) -> None:
        super().__init__()
        self.net = MLP(in_dim, action_dim, hidden, activation=activation, generator=generator, layer_norm=layer_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(self.features(x)))


class DuelingQNetwork(ReadsFeatures, ActingNetwork, nn.Module):
    """Dueling Q-values (Wang et al. 2016) in Stable-Baselines' form: a value stream ``V(s)`` and an advantage stream
    ``A(s, .)``, each its own MLP from the observations with the hidden layers ``hidden``, combined as
    ``Q(s, a) = V(s) + A(s, a) - mean_b A(s, b)``."""

    def __init__(self, in_dim: int, n_actions: int, hidden: Sequence[int], *, activation: Any = "relu",
                 generator: torch.Generator | None = None, layer_norm: bool = False) -> None:
        super().__init__()
        self.advantage = MLP(in_dim, n_actions, hidden, activation=activation, generator=generator, layer_norm=layer_norm)
        self.value = MLP(in_dim, 1, hidden, activation=activation, generator=generator, layer_norm=layer_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        advantage = self.advantage(x)
        return self.value(x) + (advantage - advantage.mean(dim=1, keepdim=True))
