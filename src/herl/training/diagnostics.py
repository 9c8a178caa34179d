"""What a HER run's replay and critics look like: numbers that tell "a bug" from "a recipe that does not
learn yet", logged with every row of training statistics under ``diagnostics/``.

- ``reward0_share``: share of a sampled batch (relabeled transitions included) whose reward is 0, the
  reward of reaching the goal in -1/0 goal tasks. About ``k/(k+1)`` of a batch is relabeled; with future
  goals, transitions whose achieved goal does not move until the episode's end all get reward 0.
- ``goal_moves_share``: share of the sampled transitions whose achieved goal moved (by more than 1e-3 in
  any coordinate): for FetchPush, how often the block is touched. Near 0, the agent cannot learn to push.
- ``goal_moved_episodes``: share of the last 100 episodes stored whose achieved goal ended elsewhere than it
  started (by more than 1e-3 in any coordinate): for FetchPush, the training episodes that moved the block. Falling
  towards 0 while success stays low: the policy stopped touching the object, exploration collapsed. ``herl train``'s
  checkpoints keep the window (the buffer's ``goal_moved_history``), so a resumed run logs what one never stopped does.
- ``q_mean``, ``q_min``, ``q_max``: the critics' estimates for the batch's actions, next to ``q_bound``
  ``= -1/(1-gamma)``, the lowest return of -1/0 rewards: estimates far outside ``[q_bound, 0]``
  (beyond the entropy bonus, for SAC-like algorithms) mean the critic diverges.
- ``obs_std_min``, ``obs_std_max``: the spread of the observation normalizer's standard deviations.

The batch is drawn with the buffer's generator, whose state is put back afterwards: a run logs the same
numbers and trains the same whether or not anyone reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


@torch.no_grad()
def replay_diagnostics(model: Any, batch_size: int = 1024) -> dict[str, float]:
    """The ``diagnostics/*`` numbers above for ``model`` (empty while its replay buffer is)."""
    buffer = model.replay_buffer
    if buffer is None or len(buffer) == 0:
        return {}
    state = buffer.rng.bit_generator.state
    try:
        batch = buffer.sample(batch_size)
    finally:
        buffer.rng.bit_generator.state = state
    out = {"reward0_share": (batch.rewards == 0).float().mean()}
    obs = batch.observations
    if isinstance(obs, Mapping) and "achieved_goal" in obs:
        before, after = obs["achieved_goal"], batch.next_observations["achieved_goal"]
        # whole-number and boolean goals (torch has no `-` for booleans) move when they change at all
        moves = (after - before).abs() > 1e-3 if before.is_floating_point() else after != before
        out["goal_moves_share"] = moves.reshape(moves.shape[0], -1).any(dim=1).float().mean()
    moved = getattr(buffer, "goal_moved_share", None)
    if moved is not None:
        out["goal_moved_episodes"] = moved
    q = model.q_estimates(batch)
    if q is not None:
        out.update(q_mean=q.mean(), q_min=q.min(), q_max=q.max())
        gamma = model.config.gamma
        out["q_bound"] = -1.0 / (1.0 - gamma) if gamma < 1 else float("-inf")
    normalizer = model.encoder.normalizer
    if normalizer is not None and normalizer.count > 0:
        out.update(obs_std_min=normalizer.std.min(), obs_std_max=normalizer.std.max())
    return {f"diagnostics/{k}": float(v) for k, v in out.items()}
