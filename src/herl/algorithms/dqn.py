"""Deep Q-Network (Mnih et al. 2015) with optional double Q-learning (van Hasselt et al. 2016):
the algorithm of HER's bit-flipping experiments.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from herl.errors import POSITIVE_INT, PROBABILITY, Rule, number
from herl.nn.mlp import MLP
from herl.nn.policies import DuelingQNetwork
from herl.training.base import OffPolicyAlgorithm
from herl.training.config import OffPolicyConfig


@dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN's hyperparameters (SB3's defaults, plus ``double_q``)."""

    learning_rate: float = 1e-4
    """Adam's step size."""
    batch_size: int = 32
    """Transitions per gradient step."""
    tau: float = 1.0
    """Polyak coefficient of the target update (1.0: copy)."""
    train_freq: tuple[int, str] = (4, "step")
    """Update every 4 env steps."""
    target_update_interval: int = 10_000
    """Env steps between target-network updates."""
    exploration_fraction: float = 0.1
    """Fraction of the training during which epsilon decays linearly."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the start."""
    exploration_final_eps: float = 0.05
    """Epsilon after the decay."""
    max_grad_norm: float = 10.0
    """Gradients are clipped to this global norm."""
    double_q: bool = False
    """Pick the next action with the online network and value it with the target network (double DQN)."""

    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "target_update_interval": POSITIVE_INT,
        "exploration_fraction": PROBABILITY,
        "exploration_initial_eps": PROBABILITY,
        "exploration_final_eps": PROBABILITY,
        "max_grad_norm": number(0.0, low_open=True),
    }


class DQN(OffPolicyAlgorithm):
    """DQN for Discrete action spaces. See :class:`~herl.training.base.OffPolicyAlgorithm` for the arguments.
    ``policy_kwargs`` also take ``dueling`` (default False, as SB3; Stable-Baselines' default is True): a
    :class:`~herl.nn.policies.DuelingQNetwork` instead of one MLP."""

    config_class = DQNConfig
    updates_priorities = True
    default_net_arch = (64, 64)
    action_space_types = (spaces.Discrete,)
    policy_options = {"dueling": False}
    saved_state = (*OffPolicyAlgorithm.saved_state, "exploration_rate", "_last_target_update")

    def _build(self, generator: torch.Generator) -> None:
        arch = self.policy_config
        network = DuelingQNetwork if arch.options["dueling"] else MLP
        features = self._make_features()
        self.q_net = network(self._in_dim(features), int(self.action_space.n), arch.critic_arch,
                             activation=arch.activation, generator=generator, layer_norm=arch.critic_layer_norm)
        if features is not None:
            self.q_net.attach_features(*features)
        self.q_net_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.nets.update({"q_net": self.q_net, "q_net_target": self.q_net_target})
        self.exploration_rate = 0.0  # greedy until learn() sets it from the schedule (as SB3)
        self._last_target_update = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._warn_target_update_interval()

    def _warn_target_update_interval(self) -> None:
        """More envs than ``target_update_interval``'s env steps: one step of all envs already passes the interval,
        so the target network follows the Q-network at every training call (SB3 warns so)."""
        interval, n_envs = self.config.target_update_interval, self.n_envs
        if self.env is None or n_envs <= interval:
            return
        warnings.warn("The number of environments used is greater than the target network update interval "
                      f"({n_envs} > {interval}): the interval counts env steps over all envs, so the target network "
                      "is updated at every training call", UserWarning, stacklevel=3)

    def _make_optimizers(self) -> None:
        self.optimizers["optimizer"] = self.make_optimizer(self.q_net.parameters())

    def _act_from(self, x: torch.Tensor, noise: None) -> torch.Tensor:
        return self.q_net(x).argmax(dim=1, keepdim=True)

    def _policy_actions(self, obs: Any, deterministic: bool, *, collecting: bool = False) -> np.ndarray:
        """Greedy actions, or epsilon-greedy with the current exploration rate (as SB3's DQN.predict)."""
        actions = super()._policy_actions(obs, deterministic, collecting=collecting)
        if not deterministic and self.exploration_rate > 0:
            explore = self.rng.random(actions.shape[0]) < self.exploration_rate
            if explore.any():
                actions[explore] = self._random_actions(int(explore.sum()))
        return actions

    def _collect_actions(self, obs: Any) -> np.ndarray:
        cfg = self.config
        progress = self.num_timesteps / max(self._total_timesteps, 1)
        fraction = min(progress / cfg.exploration_fraction, 1.0) if cfg.exploration_fraction > 0 else 1.0
        self.exploration_rate = cfg.exploration_initial_eps + fraction * (cfg.exploration_final_eps - cfg.exploration_initial_eps)
        return super()._collect_actions(obs)

    @torch.no_grad()
    def q_estimates(self, batch: Any) -> torch.Tensor:
        x = self.encoder.normalize(self.encoder.flatten(batch.observations))
        with self.eval_mode():
            return self.q_net(x).gather(1, batch.actions.long().reshape(-1, 1)).reshape(-1)

    def _update_inputs(self, batch: Any) -> bool:
        """Whether the target network updates after this step."""
        return self.num_timesteps - self._last_target_update >= self.config.target_update_interval

    def _losses(self, batch: Any, inputs: bool) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg = self.config
        n = batch.rewards.shape[0]
        xx = self.encode_batch(batch)
        q_all = self.q_net(xx)  # observations and next observations in one pass (double Q needs both)
        with torch.no_grad():
            next_q_target = self.q_net_target(xx[n:])
            if cfg.double_q:
                next_q = next_q_target.gather(1, q_all[n:].argmax(dim=1, keepdim=True))
            else:
                next_q = next_q_target.amax(dim=1, keepdim=True)
            target = self.td_target(batch, next_q)
        q = q_all[:n].gather(1, batch.actions.long())
        if batch.weights is None:
            loss = nn.functional.smooth_l1_loss(q, target)
            return loss, {"loss": loss}
        # prioritized replay (Schaul et al. 2015): importance weights, and |TD error| as the new priorities
        loss = (batch.weights * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        return loss, {"loss": loss, "td_error": (q - target).detach()}

    def _grad_clip_norm(self) -> float | None:
        return self.config.max_grad_norm

    def _target_updates(self, inputs: bool) -> tuple[tuple[nn.Module, nn.Module, float], ...]:
        return ((self.q_net_target, self.q_net, self.config.tau),) if inputs else ()

    def _after_step(self, batch: Any, inputs: bool, info: dict[str, Any]) -> dict[str, Any]:
        if "td_error" in info:
            self.replay_buffer.update_priorities(batch.indexes, info["td_error"])
        if inputs:
            self._last_target_update = self.num_timesteps
        return {"loss": info["loss"], "exploration_rate": self.exploration_rate}
