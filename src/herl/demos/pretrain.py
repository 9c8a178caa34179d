"""Behaviour cloning (Stable Baselines' ``pretrain``): fit a model's policy to demonstrations by supervised learning.

Actor algorithms (DDPG, TD3, SAC, TQC, CrossQ) regress the deterministic action (SAC's family: tanh of the
Gaussian's mean) on the demo action scaled to [-1, 1], with the squared error; DQN reads its Q-values as logits
of the demo action, with the cross-entropy. The observation normalizer first takes the demo observations in, so
the policy sees them as it will see them when acting. Target networks are set to the trained ones afterwards.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from herl.demos.dataset import Demonstrations, as_demonstrations, policy_scale


def pretrain(model: Any, dataset: Demonstrations | str | os.PathLike, *, n_epochs: int = 10,
             learning_rate: float = 1e-4, batch_size: int = 64, adam_epsilon: float = 1e-8,
             verbose: int | None = None) -> list[float]:
    """Behaviour cloning of ``model``'s policy on ``dataset`` (Demonstrations, a dataset folder or a Minari id);
    returns the mean loss of each epoch."""
    if n_epochs < 1 or batch_size < 1 or not learning_rate > 0:
        raise ValueError(f"n_epochs and batch_size must be >= 1 and learning_rate > 0, got {n_epochs}, {batch_size}, "
                         f"{learning_rate}")
    demos = as_demonstrations(dataset)
    demos.check_spaces(model.observation_space, model.action_space)
    verbose = model.verbose if verbose is None else verbose
    device = model.device
    x_all = model.encoder.flatten_numpy(demos.observations, device)
    model.encoder.update(x_all)
    targets = _targets(demos.actions, model.action_space, device)
    discrete = isinstance(model.action_space, spaces.Discrete)
    network = model.q_net if discrete else model.actor
    optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate, eps=adam_epsilon)
    losses = []
    for epoch in range(n_epochs):
        order = torch.as_tensor(model.rng.permutation(len(demos)), device=device)
        total = 0.0
        for start in range(0, len(demos), batch_size):
            rows = order[start:start + batch_size]
            x = model.encoder.normalize(x_all[rows])
            if discrete:
                loss = nn.functional.cross_entropy(model.q_net(x), targets[rows])
            else:
                loss = (model._act(x, True) - targets[rows]).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
        losses.append(total / len(demos))
        if verbose:
            print(f"pretrain epoch {epoch + 1}/{n_epochs}: loss {losses[-1]:.5f}")
    for target, source in (("actor_target", "actor"), ("q_net_target", "q_net")):
        if hasattr(model, target):
            getattr(model, target).load_state_dict(getattr(model, source).state_dict())
    return losses


def _targets(actions: np.ndarray, space: spaces.Space, device: torch.device) -> torch.Tensor:
    """Demo actions in the policy's scale: [-1, 1] boxes, or action indices."""
    scaled = policy_scale(actions, space)
    if isinstance(space, spaces.Discrete):
        return torch.as_tensor(scaled.reshape(-1), device=device)
    return torch.as_tensor(scaled.reshape(len(actions), -1), dtype=torch.float32, device=device)
