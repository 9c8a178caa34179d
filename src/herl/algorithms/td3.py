"""Twin Delayed DDPG (Fujimoto et al. 2018, arXiv:1802.09477): clipped double Q, delayed actor
updates and target policy smoothing.

As in :mod:`herl.algorithms.sac`, the critic and actor losses go through one backward pass and
one fused Adam step (the actor's gradient reaches the critics as constants, so the sum has the
same gradients as separate passes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from herl.algorithms.bc import DemoLossConfig, bc_loss
from herl.errors import POSITIVE_INT, PROBABILITY, Rule, number
from herl.nn.mlp import EnsembleMLP
from herl.nn.policies import DeterministicActor
from herl.training.base import OffPolicyAlgorithm
from herl.training.config import OffPolicyConfig


@dataclass(frozen=True)
class TD3Config(OffPolicyConfig, DemoLossConfig):
    """TD3's hyperparameters (SB3's defaults)."""

    learning_rate: float = 1e-3
    """Adam's step size for actor and critics."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Standard deviation of the Gaussian noise added to target actions (policy smoothing)."""
    target_noise_clip: float = 0.5
    """That noise is clipped to ``±target_noise_clip``."""
    action_l2: float = 0.0
    """Weight of the penalty on the actor's squared actions (OpenAI baselines' HER DDPG uses 1.0)."""
    random_action_prob: float = 0.0
    """Probability that an exploration step takes a uniformly random action instead of the noisy
    policy's (OpenAI baselines' HER DDPG uses 0.3); ``learning_starts`` steps are random anyway."""
    actor_learning_rate: float | None = None
    """The actor's step size, when it differs from ``learning_rate`` (SB2's DDPG: ``actor_lr=1e-4``)."""
    critic_learning_rate: float | None = None
    """The critics' step size, when it differs from ``learning_rate`` (SB2's DDPG: ``critic_lr=1e-3``)."""

    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "policy_delay": POSITIVE_INT,
        "target_policy_noise": number(0.0),
        "target_noise_clip": number(0.0),
        "action_l2": number(0.0),
        "random_action_prob": PROBABILITY,
        "actor_learning_rate": number(0.0, low_open=True, also=(None,), note="None: learning_rate"),
        "critic_learning_rate": number(0.0, low_open=True, also=(None,), note="None: learning_rate"),
    }


class TD3(OffPolicyAlgorithm):
    """TD3 for Box action spaces. See :class:`~herl.training.base.OffPolicyAlgorithm` for the arguments."""

    config_class = TD3Config
    fixed_hyperparameters = OffPolicyAlgorithm.fixed_hyperparameters | {"actor_learning_rate", "critic_learning_rate"}
    default_net_arch = (400, 300)

    def _build(self, generator: torch.Generator) -> None:
        arch = self.policy_config
        actor_features, critic_features = self._network_inputs()
        self.actor = DeterministicActor(self._in_dim(actor_features), self.action_dim, arch.actor_arch,
                                        activation=arch.activation, generator=generator, layer_norm=arch.actor_layer_norm)
        self.critic = EnsembleMLP(self._in_dim(critic_features) + self.action_dim, 1, arch.critic_arch,
                                  n_members=arch.n_critics, activation=arch.activation, generator=generator,
                                  layer_norm=arch.critic_layer_norm)
        if actor_features is not None:
            self.actor.attach_features(*actor_features)
            self.critic.attach_features(*critic_features)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.nets.update({"actor": self.actor, "critic": self.critic, "actor_target": self.actor_target,
                          "critic_target": self.critic_target})

    def _make_optimizers(self) -> None:
        cfg = self.config
        actor = self.unique_parameters(self.actor)
        in_actor = {id(p) for p in actor}  # a shared extractor learns from the actor's loss, at its rate (SB3)
        critic = [p for p in self.unique_parameters(self.critic) if id(p) not in in_actor]
        if cfg.actor_learning_rate is None and cfg.critic_learning_rate is None:
            self.optimizers["optimizer"] = self.make_optimizer(critic + actor)
            return
        # still one Adam step for both (see the module docstring), with a step size per parameter group
        self.optimizers["optimizer"] = self.make_optimizer([
            {"params": critic, "lr": cfg.critic_learning_rate or cfg.learning_rate},
            {"params": actor, "lr": cfg.actor_learning_rate or cfg.learning_rate},
        ])

    def _act_from(self, x: torch.Tensor, noise: None) -> torch.Tensor:
        return self.actor(x)  # exploration noise is the loop's action_noise

    def _collect_actions(self, obs: Any) -> np.ndarray:
        return self._mix_random_actions(super()._collect_actions(obs), self.config.random_action_prob)

    def _update_inputs(self, batch: Any) -> tuple[torch.Tensor | None, bool]:
        """The target policy's smoothing noise (None without it), and whether the actor and the targets update."""
        cfg = self.config
        noise = None
        if cfg.target_policy_noise > 0:
            noise = torch.randn((batch.rewards.shape[0], self.action_dim), generator=self.torch_rng, device=self.device)
        return noise, (self._n_updates + 1) % cfg.policy_delay == 0

    def _losses(self, batch: Any, inputs: tuple[torch.Tensor | None, bool]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg = self.config
        noise, update_actor = inputs
        n = batch.rewards.shape[0]
        xx = self.encode_batch(batch)
        x, next_x = xx[:n], xx[n:]
        cx, next_cx, policy_cx = self._critic_inputs(x, next_x)
        with torch.no_grad():
            next_actions = self.actor_target(next_x)
            if noise is not None:
                noise = (noise * cfg.target_policy_noise).clamp_(-cfg.target_noise_clip, cfg.target_noise_clip)
                next_actions = (next_actions + noise).clamp_(-1.0, 1.0)
            next_q = self.critic_target(torch.cat([next_cx, next_actions], dim=1)).amin(0)
            target = self.td_target(batch, next_q)
        q = self.critic(torch.cat([cx, batch.actions], dim=1))
        critic_loss = (q - target).square().mean(dim=(1, 2)).sum()
        loss = critic_loss
        info: dict[str, Any] = {"critic_loss": critic_loss}
        if update_actor:
            actions = self.actor(x)
            q_policy = self.critic(torch.cat([policy_cx, actions], dim=1), detach_params=True)[0]
            actor_loss = -q_policy.mean()
            if cfg.action_l2:
                actor_loss = actor_loss + cfg.action_l2 * actions.square().mean()
            if cfg.bc_loss_weight:  # the Q-filter compares the values the critic and actor losses computed already
                filter_q = dict(q_demo=q[0].detach(), q_policy=q_policy.detach()) if cfg.q_filter else {}
                demo_loss = bc_loss(actions, batch.actions, batch.demo_mask, **filter_q)
                actor_loss = actor_loss + cfg.bc_loss_weight * demo_loss
            loss = loss + actor_loss
            info["actor_loss"] = actor_loss
            if cfg.bc_loss_weight:
                info["bc_loss"] = demo_loss
        return loss, info

    def _parameters_left_out(self, inputs: tuple[torch.Tensor | None, bool]) -> set[int]:
        """Between delayed updates the loss does not reach the actor (nor an extractor it shares: the critics read
        its features as constants)."""
        return set() if inputs[1] else {id(p) for p in self.actor.parameters()}

    def _target_updates(self, inputs: tuple[torch.Tensor | None, bool]) -> tuple[tuple[nn.Module, nn.Module, float], ...]:
        """The targets follow with the actor."""
        tau = self.config.tau
        return ((self.critic_target, self.critic, tau), (self.actor_target, self.actor, tau)) if inputs[1] else ()

    def _after_step(self, batch: Any, inputs: tuple[torch.Tensor | None, bool], info: dict[str, Any]) -> dict[str, Any]:
        """The losses logged are those of the last step that updated the actor."""
        return info if inputs[1] else self._train_info
