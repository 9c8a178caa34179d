"""CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample
Efficiency and Simplicity", arXiv:1902.05605): SAC without target networks, with batch renormalization in
actor and critics.

Batch statistics of ``(s, a)`` and ``(s', pi(s'))`` differ; a critic normalized on the first alone sees
the second as out of distribution. CrossQ therefore evaluates both in *one* forward pass of the critics
in training mode, so the normalization's statistics are those of the mixture, and bootstraps from the
second half of that pass (as a constant), with no target network. The actor is updated every
``policy_delay`` critic updates, through the critics in evaluation mode. Adam uses beta1 = 0.5.
sb3-contrib's interface and defaults: ``CrossQ("MultiInputPolicy", env, policy_delay=3,
policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[1024, 1024]), batch_norm_momentum=0.01,
renorm_warmup_steps=100_000))``.

As in :mod:`herl.algorithms.sac`, critic, actor and entropy-coefficient losses go through one backward
pass and one fused Adam step.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from herl.algorithms.sac import SAC, SACConfig
from herl.errors import POSITIVE_INT, ConfigError, Rule, number
from herl.nn.batch_renorm import RenormMLP
from herl.nn.mlp import AUTO_PRECISION
from herl.nn.policies import SquashedGaussianActor
from herl.training.config import PolicyConfig


@dataclass(frozen=True)
class CrossQConfig(SACConfig):
    """CrossQ's hyperparameters (sb3-contrib's defaults). ``tau`` and ``target_update_interval`` do not apply
    (CrossQ has no target networks): values other than their defaults are refused."""

    learning_rate: float = 1e-3
    """Adam's step size for actor, critics and entropy coefficient."""
    policy_delay: int = 3
    """Critic updates per actor (and entropy coefficient) update."""
    adam_beta1: float = 0.5
    """Adam's first-moment decay (CrossQ's 0.5 instead of Adam's usual 0.9)."""

    field_rules: ClassVar[Mapping[str, Rule | None]] = {
        "policy_delay": POSITIVE_INT,
        "adam_beta1": number(0.0, 1.0, high_open=True),
    }

    def validate(self) -> None:
        super().validate()
        base = SACConfig()
        for name in ("tau", "target_update_interval"):
            if getattr(self, name) != getattr(base, name):
                raise ConfigError(self.owner(), name, getattr(self, name),
                                  f"only its default {getattr(base, name)!r}: CrossQ has no target networks, so it "
                                  f"does not apply (leave it out)")
        if self.bc_loss_weight:
            raise ConfigError(self.owner(), "bc_loss_weight", self.bc_loss_weight,
                              "0: CrossQ has no behaviour-cloning loss yet (an extra actor pass would move its batch "
                              "renormalization statistics); use SAC or TQC to learn from demonstrations")
        if self.compile:
            raise ConfigError(self.owner(), "compile", self.compile,
                              "False: CrossQ's batch renormalization counts its steps in Python and switches its "
                              "networks between training and eval mode inside the update, which torch.compile would "
                              "compile again at every update; use SAC or TQC for a compiled update")


class CrossQ(SAC):
    """CrossQ for Box action spaces (sb3-contrib's interface). ``policy_kwargs`` also take ``batch_norm_momentum``
    (0.01), ``batch_norm_eps`` (0.001) and ``renorm_warmup_steps`` (100,000); see
    :class:`~herl.training.base.OffPolicyAlgorithm` for the rest."""

    config_class = CrossQConfig
    fixed_hyperparameters = SAC.fixed_hyperparameters | {"adam_beta1"}
    default_net_arch = {"pi": (256, 256), "qf": (1024, 1024)}
    policy_options = {"batch_norm_momentum": 0.01, "batch_norm_eps": 0.001, "renorm_warmup_steps": 100_000}
    precisions = ("float32",)  # batch renormalization runs in float32; precision="auto" resolves to it

    @classmethod
    def check_policy_config(cls, arch: PolicyConfig) -> None:
        options = arch.options
        if not 0.0 < options["batch_norm_momentum"] <= 1.0:
            raise ValueError(f"policy_kwargs batch_norm_momentum must be in (0, 1], got {options['batch_norm_momentum']}")
        if not (options["batch_norm_eps"] > 0 and math.isfinite(options["batch_norm_eps"])) or options["renorm_warmup_steps"] < 0:
            raise ValueError("policy_kwargs batch_norm_eps must be > 0 and renorm_warmup_steps >= 0, got "
                             f"{options['batch_norm_eps']} and {options['renorm_warmup_steps']}")
        if arch.precision not in (*cls.precisions, AUTO_PRECISION):
            raise ValueError(f"policy_kwargs precision={arch.precision!r} is not supported by CrossQ (its batch-renormalized "
                             "layers run in float32): leave precision at 'float32' (or 'auto'), or use SAC or TQC")
        if arch.layer_norm:
            raise ValueError(f"policy_kwargs layer_norm={arch.layer_norm!r} is not supported by CrossQ (its layers are "
                             "batch-renormalized): leave layer_norm off, or use SAC or TQC")

    def _build(self, generator: torch.Generator) -> None:
        arch, options = self.policy_config, self.policy_config.options
        if arch.features_extractor is not None:
            raise ValueError(f"CrossQ does not take a features extractor ({arch.features_extractor}): its critics "
                             "normalize their inputs with batch renormalization over observations and next "
                             "observations together; use SAC or TQC for image observations or a features_extractor_class")
        norm = dict(momentum=options["batch_norm_momentum"], eps=options["batch_norm_eps"],
                    warmup_steps=options["renorm_warmup_steps"], activation=arch.activation, generator=generator)
        trunk = RenormMLP(self.obs_dim, 2 * self.action_dim, arch.actor_arch, **norm)
        self.actor = SquashedGaussianActor(self.obs_dim, self.action_dim, arch.actor_arch, net=trunk,
                                           squash_eps=self.config.squash_eps)
        self.critic = RenormMLP(self.obs_dim + self.action_dim, 1, arch.critic_arch, n_members=arch.n_critics, **norm)
        self._build_entropy_coefficient()
        self.nets.update({"actor": self.actor, "critic": self.critic,
                          "ent_coef": nn.ParameterDict({"log_ent_coef": self._log_ent_coef})})

    def _make_optimizers(self) -> None:
        params = [*self.critic.parameters(), *self.actor.parameters()]
        if self.learn_ent_coef:
            params.append(self._log_ent_coef)
        self.optimizers["optimizer"] = self.make_optimizer(params, betas=(self.config.adam_beta1, 0.999))

    def _act(self, x: torch.Tensor, deterministic: bool) -> torch.Tensor:
        self.actor.train(False)  # acting uses the running statistics, and leaves them as they are
        return super()._act(x, deterministic)

    def _update_inputs(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The actor's noise for the next observations, and for the observations when the actor updates (else None)."""
        n = batch.rewards.shape[0]
        next_noise = torch.randn(n, self.action_dim, generator=self.torch_rng, device=self.device)
        update_actor = (self._n_updates + 1) % self.config.policy_delay == 0
        noise = torch.randn(n, self.action_dim, generator=self.torch_rng, device=self.device) if update_actor else None
        return next_noise, noise

    def _losses(self, batch: Any, inputs: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, dict[str, Any]]:
        next_noise, noise = inputs
        n = batch.rewards.shape[0]
        xx = self.encode_batch(batch)
        x, next_x = xx[:n], xx[n:]
        ent_coef = self.ent_coef_tensor
        with torch.no_grad():
            self.actor.train(False)
            next_actions, next_log_prob = self.actor(next_x, next_noise)
        # one pass over (s, a) and (s', a'): the normalization's statistics are the mixture's (see the module doc)
        self.critic.train(True)
        q_all = self.critic(torch.cat([xx, torch.cat([batch.actions, next_actions])], dim=1))
        q, next_q = q_all[:, :n], q_all[:, n:].detach().amin(0)
        target = self.td_target(batch, torch.addcmul(next_q, ent_coef, next_log_prob, value=-1.0))
        critic_loss = 0.5 * (q - target).square().mean(dim=(1, 2)).sum()
        loss = critic_loss
        info = {"critic_loss": critic_loss, "ent_coef": ent_coef}
        if noise is not None:
            self.actor.train(True)
            self.critic.train(False)
            actions, log_prob = self.actor(x, noise)
            q_pi = self.critic(torch.cat([x, actions], dim=1), detach_params=True).amin(0)
            actor_loss = (ent_coef * log_prob - q_pi).mean()
            loss = loss + actor_loss
            if self.learn_ent_coef:
                loss = loss - (self.log_ent_coef * (log_prob.detach() + self.target_entropy)).mean()
            info["actor_loss"] = actor_loss
        self.actor.train(False)
        return loss, info

    def _target_updates(self, inputs: tuple[torch.Tensor, torch.Tensor | None]) -> tuple:
        return ()  # no target networks

    def _after_step(self, batch: Any, inputs: tuple[torch.Tensor, torch.Tensor | None], info: dict[str, Any]) -> dict[str, Any]:
        if "actor_loss" not in info and "actor_loss" in self._train_info:  # the last actor update's
            info["actor_loss"] = self._train_info["actor_loss"]
        return info
