"""Learning from demonstrations during training (Nair et al. 2018, "Overcoming Exploration in Reinforcement Learning
with Demonstrations", arXiv:1709.10089): a behaviour-cloning term in the actor's loss, on the batch's demo rows,
kept only where the critic prefers the demo action to the policy's (the Q-filter).

The replay buffer supplies the demo rows (``HerReplayBuffer(..., demonstrations=...)``, whose batches carry a
``demo_mask``); DDPG, TD3, SAC and TQC add ``bc_loss_weight * bc_loss(...)`` to their actor loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from herl.errors import BOOL, ConfigError, Rule, number


@dataclass(frozen=True)
class DemoLossConfig:
    """The behaviour-cloning hyperparameters, shared by the actor-critic configs that use them."""

    bc_loss_weight: float = 0.0
    """Weight of the behaviour-cloning loss on the batch's demonstration rows in the actor's loss; 0 turns it off.
    The loss is a mean over demo rows of ``||pi(s, g) - a_demo||^2`` (actions in [-1, 1]), so 1.0 weighs it as
    Nair et al. 2018 did (their 0.0078 on a sum over 128 demo rows, against 0.001 on a sum over 1024 Q-values)."""
    q_filter: bool = True
    """Clone a demo action only where the critic values it above the policy's own action (Nair et al.'s Q-filter),
    so that the policy can outgrow an imperfect demonstrator."""

    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "bc_loss_weight": number(0.0, note="0: off"),
        "q_filter": BOOL,
    }


def bc_loss(actions: torch.Tensor, demo_actions: torch.Tensor, demo_mask: torch.Tensor | None, *,
            q_demo: torch.Tensor | None = None, q_policy: torch.Tensor | None = None) -> torch.Tensor:
    """Nair et al.'s behaviour-cloning loss over a batch: the mean over its demo rows of ``||actions - demo_actions||^2``
    (summed over action dimensions), a row counting 0 where ``q_demo <= q_policy`` when those are given (the Q-filter).

    ``actions``: the policy's (deterministic) actions ``(batch, dim)``, with gradient; ``demo_actions``: the stored
    actions; ``demo_mask``: which rows are demonstrations ``(batch,)``; ``q_demo`` / ``q_policy``: the critic's values of
    the demo action and of ``actions``, ``(batch, 1)`` or ``(batch,)``, constants. Computed over every row with the
    mask as a weight, so it needs no device sync. The divisor is the number of demo rows, filtered ones included (as
    Nair et al.'s weight 1/128 on a sum over their 128 demo rows): the term shrinks as the policy overtakes the demos.
    """
    if demo_mask is None:
        raise ValueError("the batch has no demo_mask: the behaviour-cloning loss needs a replay buffer with "
                         "demonstrations (HerReplayBuffer(..., demonstrations=...))")
    weight = demo_mask.to(actions.dtype)
    if q_demo is not None:
        weight = weight * (q_demo.reshape(-1) > q_policy.reshape(-1)).to(actions.dtype)
    per_row = (actions - demo_actions.to(actions.dtype)).square().sum(dim=1)
    return (weight * per_row).sum() / demo_mask.sum().clamp_min(1).to(actions.dtype)


def check_demonstrations(model: Any, buffer: Any) -> None:
    """A :class:`ConfigError` if ``model`` weighs a behaviour-cloning loss but ``buffer`` (its replay buffer) has no
    demonstrations to clone, or draws none into its batches."""
    weight = getattr(model.config, "bc_loss_weight", 0.0)
    if not weight or buffer is None:
        return
    fix = ("give the replay buffer some with replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict("
           "demonstrations='demos/'), or leave bc_loss_weight at 0")
    if getattr(buffer, "demo_storage", None) is None:
        raise ConfigError(type(model).__name__, "bc_loss_weight", weight,
                          f"0 (off) when the replay buffer holds no demonstrations: {fix}")
    if buffer.demo_rows(model.config.batch_size) == 0:
        raise ConfigError(type(model).__name__, "bc_loss_weight", weight,
                          f"0 (off) when no batch row comes from the demonstrations: demo_batch_ratio="
                          f"{buffer.demo_batch_ratio} of batch_size={model.config.batch_size} rounds down to 0 rows; "
                          "raise demo_batch_ratio")
