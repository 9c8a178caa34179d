"""Soft Actor-Critic (Haarnoja et al. 2018, arXiv:1801.01290 and 1812.05905), with automatic entropy tuning.

One update is a single backward pass and a single fused Adam step: the critic loss, the actor
loss (through the critics with their weights held constant) and the entropy-coefficient loss
touch disjoint parameters, so their sum has exactly the gradients of three separate backward
passes, at a third of the operations (each eager op costs ~5 µs on CPU; the networks are small).
The actor acts on the observations and the next observations in one forward pass.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from herl.algorithms.bc import DemoLossConfig, bc_loss
from herl.errors import POSITIVE_INT, PROBABILITY, ConfigError, Rule, number
from herl.nn.mlp import EnsembleMLP
from herl.nn.policies import SquashedGaussianActor
from herl.training.base import OffPolicyAlgorithm
from herl.training.config import OffPolicyConfig


@dataclass(frozen=True)
class SACConfig(OffPolicyConfig, DemoLossConfig):
    """SAC's hyperparameters (SB3's defaults)."""

    ent_coef: float | str = "auto"
    """Entropy coefficient alpha: a number, ``"auto"`` (learned, starting at 1) or ``"auto_0.1"`` (learned, starting at 0.1)."""
    target_entropy: float | str = "auto"
    """Entropy the learned alpha aims for; ``"auto"``: minus the action dimension."""
    target_update_interval: int = 1
    """Gradient steps between target-critic updates."""
    squash_eps: float = 1e-6
    """The tanh squashing's log-determinant in the policy's log-probability, ``log(1 - tanh(u)^2 + squash_eps)``:
    SB3's, sb3-contrib's and the SAC authors' form (the default, 1e-6), which stops at ``log(1e-6)`` per dimension,
    so that fully saturated actions (``|u| > 7``) cost no entropy and a noisy policy can explore with bang-bang
    actions (on FetchPush it moved the block more often than the exact form); 0 for the exact
    ``log(1 - tanh(u)^2)``."""
    random_action_prob: float = 0.0
    """Probability that an exploration step takes a uniformly random action instead of the policy's sample
    (SB2's ``random_exploration``, "useful when using HER")."""

    # squash_eps came with the exact form as its default (0); files from before it was a field computed that form
    former_defaults: ClassVar[Mapping[str, Any]] = {"squash_eps": 0.0}
    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "target_update_interval": POSITIVE_INT,
        "random_action_prob": PROBABILITY,
        "squash_eps": number(0.0, 1.0, high_open=True, note="SB3's value is 1e-6"),
        "ent_coef": None,  # checked below: a number or a string
        "target_entropy": None,
    }

    def validate(self) -> None:
        super().validate()
        owner, coef = self.owner(), self.ent_coef
        initial = coef[len("auto_"):] if isinstance(coef, str) and coef.startswith("auto_") else coef
        if coef != "auto" and not _positive(initial):
            raise ConfigError(owner, "ent_coef", coef, "a finite number > 0, 'auto' (learned, starting at 1) or "
                              "'auto_<initial value>' (learned, starting there, e.g. 'auto_0.1')")
        if self.target_entropy != "auto" and not number().accepts(self.target_entropy):
            raise ConfigError(owner, "target_entropy", self.target_entropy, "a finite number, or 'auto' (minus the "
                              "action dimension)")


def _positive(value: Any) -> bool:
    try:
        value = float(value) if isinstance(value, str) else value
    except ValueError:
        return False
    return number(0.0, low_open=True).accepts(value)


class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic for Box action spaces. See :class:`~herl.training.base.OffPolicyAlgorithm` for the arguments."""

    config_class = SACConfig
    fixed_hyperparameters = OffPolicyAlgorithm.fixed_hyperparameters | {"ent_coef", "squash_eps"}

    @property
    def critic_outputs(self) -> int:
        """Outputs of each critic: one Q-value (TQC: its quantiles)."""
        return 1

    def _build(self, generator: torch.Generator) -> None:
        arch = self.policy_config
        actor_features, critic_features = self._network_inputs()
        self.actor = SquashedGaussianActor(self._in_dim(actor_features), self.action_dim, arch.actor_arch,
                                           activation=arch.activation, generator=generator,
                                           squash_eps=self.config.squash_eps, layer_norm=arch.actor_layer_norm)
        self.critic = EnsembleMLP(self._in_dim(critic_features) + self.action_dim, self.critic_outputs, arch.critic_arch,
                                  n_members=arch.n_critics, activation=arch.activation, generator=generator,
                                  layer_norm=arch.critic_layer_norm)
        if actor_features is not None:
            self.actor.attach_features(*actor_features)
            self.critic.attach_features(*critic_features)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._build_entropy_coefficient()
        self.nets.update({"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                          "ent_coef": nn.ParameterDict({"log_ent_coef": self._log_ent_coef})})

    def _build_entropy_coefficient(self) -> None:
        cfg = self.config
        self.learn_ent_coef = isinstance(cfg.ent_coef, str)
        initial = float(cfg.ent_coef.split("_")[1]) if self.learn_ent_coef and "_" in cfg.ent_coef else 1.0
        initial = initial if self.learn_ent_coef else float(cfg.ent_coef)
        # stored (and saved) either way; SB3's names: log_ent_coef is the learned parameter (None when ent_coef is a
        # number), ent_coef_tensor the coefficient
        self._log_ent_coef = nn.Parameter(torch.tensor(math.log(initial)), requires_grad=self.learn_ent_coef)
        self.log_ent_coef = self._log_ent_coef if self.learn_ent_coef else None
        self.target_entropy = -float(self.action_dim) if cfg.target_entropy == "auto" else float(cfg.target_entropy)

    @property
    def ent_coef_tensor(self) -> torch.Tensor:
        """The entropy coefficient alpha, a constant (SB3's name)."""
        return self._log_ent_coef.detach().exp()

    def _config_changed(self, old: Any) -> None:
        super()._config_changed(old)
        target = self.config.target_entropy
        object.__setattr__(self, "target_entropy", -float(self.action_dim) if target == "auto" else float(target))

    def _make_optimizers(self) -> None:
        params = self.unique_parameters(self.critic, self.actor)
        if self.learn_ent_coef:
            params.append(self._log_ent_coef)
        self.optimizers["optimizer"] = self.make_optimizer(params)

    def _act_noise(self, n: int, deterministic: bool) -> torch.Tensor | None:
        return None if deterministic else torch.randn(n, self.action_dim, generator=self.torch_rng, device=self.device)

    def _act_from(self, x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        return self.actor(x, noise)[0]

    def _collect_actions(self, obs: Any) -> np.ndarray:
        return self._mix_random_actions(super()._collect_actions(obs), self.config.random_action_prob)

    def _update_inputs(self, batch: Any) -> tuple[torch.Tensor, bool]:
        """The actor's noise for the observations and next observations, and whether the target critics update."""
        noise = torch.randn(2 * batch.rewards.shape[0], self.action_dim, generator=self.torch_rng, device=self.device)
        return noise, (self._n_updates + 1) % self.config.target_update_interval == 0

    def _losses(self, batch: Any, inputs: tuple[torch.Tensor, bool]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        noise = inputs[0]
        n = batch.rewards.shape[0]
        xx = self.encode_batch(batch)
        x, next_x = xx[:n], xx[n:]
        actions, log_prob = self.actor(x, noise[:n])
        # the next observations' actions feed the target only: no graph for them (a backward pass through one forward
        # of both halves multiplies the next half's zero gradients too: 7-9 % of a TQC [256, 256] update on a CPU core)
        with torch.no_grad():
            next_actions, next_log_prob = self.actor(next_x, noise[n:])
        ent_coef = self.ent_coef_tensor
        cx, next_cx, policy_cx = self._critic_inputs(x, next_x)
        critic_loss = self._critic_loss(cx, next_cx, batch, next_actions, next_log_prob, ent_coef)
        actor_loss = (ent_coef * log_prob - self._policy_value(policy_cx, actions)).mean()
        if self.config.bc_loss_weight:
            demo_loss = self._demo_loss(x, policy_cx, batch)
            actor_loss = actor_loss + self.config.bc_loss_weight * demo_loss
        loss = critic_loss + actor_loss
        if self.learn_ent_coef:
            # read through the networks (model.policy), where the compiled whole step swaps in what it differentiates
            log_ent_coef = self.nets["ent_coef"]["log_ent_coef"]
            ent_coef_loss = -(log_ent_coef * (log_prob.detach() + self.target_entropy)).mean()
            loss = loss + ent_coef_loss
        info = {"critic_loss": critic_loss, "actor_loss": actor_loss, "ent_coef": ent_coef}
        if self.config.bc_loss_weight:
            info["bc_loss"] = demo_loss
        return loss, info

    def _target_updates(self, inputs: tuple[torch.Tensor, bool]) -> tuple[tuple[nn.Module, nn.Module, float], ...]:
        return ((self.critic_target, self.critic, self.config.tau),) if inputs[1] else ()

    def _demo_loss(self, x: torch.Tensor, cx: torch.Tensor, batch: Any) -> torch.Tensor:
        """The behaviour-cloning loss on the batch's demo rows (see :mod:`herl.algorithms.bc`), for the deterministic
        action (tanh of the Gaussian's mean: what the policy does when evaluated); the Q-filter values it and the
        demo action with the critics as the actor loss does."""
        actions = self.actor(x, None)[0]
        filter_q = {}
        if self.config.q_filter:
            with torch.no_grad():
                q = self._policy_value(torch.cat([cx, cx]), torch.cat([batch.actions, actions]))
            filter_q = dict(q_demo=q[: x.shape[0]], q_policy=q[x.shape[0]:])
        return bc_loss(actions, batch.actions, batch.demo_mask, **filter_q)

    def _critic_loss(self, x: torch.Tensor, next_x: torch.Tensor, batch: Any, next_actions: torch.Tensor,
                     next_log_prob: torch.Tensor, ent_coef: torch.Tensor) -> torch.Tensor:
        """The critics' TD loss, against the soft target of the clipped double Q."""
        with torch.no_grad():
            next_q = self.critic_target(torch.cat([next_x, next_actions], dim=1)).amin(0)
            next_v = torch.addcmul(next_q, ent_coef, next_log_prob, value=-1.0)
            target = self.td_target(batch, next_v)
        q = self.critic(torch.cat([x, batch.actions], dim=1))
        return 0.5 * (q - target).square().mean(dim=(1, 2)).sum()

    def _policy_value(self, x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The value ``(batch, 1)`` the actor maximizes, through the critics with their weights held constant."""
        return self.critic(torch.cat([x, actions], dim=1), detach_params=True).amin(0)
