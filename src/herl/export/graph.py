"""The deterministic policy of a herl model as one ``nn.Module`` from raw observation arrays to env actions."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

# numpy dtypes an exported graph takes as inputs as they are; any other (bool, float16, ...) is read as float32
_INPUT_DTYPES = {np.dtype(t): getattr(torch, t) for t in ("float32", "float64", "int8", "uint8", "int16", "int32", "int64")}


@dataclass(frozen=True)
class InputSpec:
    """One named input of an exported policy."""

    name: str
    """The observation entry (``"observation"``, ``"desired_goal"``, ...; ``"obs"`` for a flat observation)."""
    shape: tuple[int, ...]
    """Shape of one observation's entry; the graph takes a batch, ``(batch, *shape)``."""
    dtype: np.dtype
    """The dtype the graph expects (the space's)."""


def input_specs(model: Any) -> list[InputSpec]:
    """The exported graph's inputs for ``model``, in order: the entries its networks read."""
    space = model.observation_space
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {"obs": space}
    specs = []
    for key in model.encoder.keys:
        sub = subspaces[key]
        dtype = np.dtype(sub.dtype) if np.dtype(sub.dtype) in _INPUT_DTYPES else np.dtype(np.float32)
        specs.append(InputSpec(key, tuple(sub.shape), dtype))
    return specs


class PolicyGraph(nn.Module):
    """``forward(*entries)``: env actions for a batch of observations given as one array per input (see
    :func:`input_specs`), exactly as ``model.predict(obs, deterministic=True)`` computes them.

    The model's networks are used as they are (not copied): export from a model that is not training.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.nets = model.nets  # registered, so tracing sees the weights as the module's parameters
        self._act = model._act
        self.encoder = model.encoder
        self.n_inputs = len(model.encoder.keys)
        space = model.action_space
        self.discrete = isinstance(space, spaces.Discrete)
        if self.discrete:
            self.start = int(space.start)
        else:
            self.shape = tuple(space.shape) if len(space.shape) != 1 else None  # a Box of several dimensions
            self.register_buffer("low", torch.as_tensor(space.low, device=model.device))
            self.register_buffer("span", torch.as_tensor(space.high - space.low, device=model.device))

    def forward(self, *entries: torch.Tensor) -> torch.Tensor:
        parts = [e.reshape(e.shape[0], -1).to(torch.float32) for e in entries]
        x = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        x = self.encoder.normalize(x)
        actions = self._act(x, True)
        if self.discrete:
            return actions.reshape(-1) + self.start
        if self.shape is not None:
            actions = actions.reshape(actions.shape[0], *self.shape)
        # the arithmetic of OffPolicyAlgorithm._unscale, in the same order, so the floats agree
        return self.low + 0.5 * (actions + 1.0) * self.span


def example_inputs(model: Any, n: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``n`` observations sampled from the model's space, as the graph's input tensors."""
    batch = sample_observations(model, n, seed)
    return tuple(torch.as_tensor(batch[spec.name], device=model.device) for spec in input_specs(model))


def sample_observations(model: Any, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` observations from the model's observation space, one array per graph input (keyed by its name)."""
    space = model.observation_space
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {"obs": space}
    rng = np.random.default_rng(seed)
    out = {}
    for spec in input_specs(model):
        sub = subspaces[spec.name]
        sub = copy.deepcopy(sub)  # a private copy to seed, leaving the model's space's generator alone
        sub.seed(int(rng.integers(2**31)))
        out[spec.name] = np.stack([np.asarray(sub.sample()) for _ in range(n)]).astype(spec.dtype)
    return out
