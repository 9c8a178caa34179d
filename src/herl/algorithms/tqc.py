"""Truncated Quantile Critics (Kuznetsov et al. 2020, arXiv:2005.04269): SAC whose critics predict the
distribution of returns as quantiles; the TD target drops the largest quantiles of the pooled critics,
which controls overestimation more finely than the minimum of two critics.

Each of ``n_critics`` critics outputs ``n_quantiles`` atoms (one :class:`~herl.nn.mlp.EnsembleMLP`, as for
SAC). The target pools the next state's ``n_critics * n_quantiles`` atoms, sorts them and keeps the smallest
``n_critics * (n_quantiles - top_quantiles_to_drop_per_net)``; every critic's atoms regress on all of them
with the quantile Huber loss. The actor maximizes the mean of all atoms. sb3-contrib's interface: ``TQC(...,
top_quantiles_to_drop_per_net=2, policy_kwargs=dict(n_quantiles=25, n_critics=2))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from herl.algorithms.sac import SAC, SACConfig
from herl.errors import NON_NEGATIVE_INT, Rule


@dataclass(frozen=True)
class TQCConfig(SACConfig):
    """TQC's hyperparameters (sb3-contrib's defaults)."""

    top_quantiles_to_drop_per_net: int = 2
    """Atoms dropped from the top of the pooled target distribution, per critic."""

    field_rules: ClassVar[Mapping[str, Rule | None]] = {"top_quantiles_to_drop_per_net": NON_NEGATIVE_INT}


def quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor, *, targets_sorted: bool = False) -> torch.Tensor:
    """Quantile regression loss with a Huber kernel (kappa = 1; Dabney et al. 2018, eq. 10), averaged.

    ``quantiles``: ``(n_critics, batch, n_quantiles)``, atom ``i`` estimating the ``(i + 0.5) / n_quantiles``
    quantile; ``targets``: ``(batch, n_targets)``, samples of the target distribution (constants;
    ``targets_sorted=True`` says they are in ascending order along each row, which saves a sort). The loss
    is the mean over every (critic, row, atom, target sample) of ``|tau_i - 1{delta < 0}| * huber(delta)``,
    ``delta = target - atom``.

    Computed without the ``(critics, batch, quantiles, targets)`` tensor of pairs (a million entries for
    sb3-contrib's recipe, ~20 ms a step forward and backward on one CPU core): with the targets of a row
    sorted, the pairs of an atom ``q`` fall in four runs, ``t < q-1`` (linear part, weight ``1 - tau``),
    ``q-1 <= t < q`` (quadratic, ``1 - tau``), ``q <= t < q+1`` (quadratic, ``tau``) and ``t >= q+1`` (linear,
    ``tau``), found by binary search; each run's sum of ``huber`` is a polynomial in ``q`` of the run's
    count, sum of ``t`` and sum of ``t**2``, read from prefix sums. Same value and gradient (to float
    rounding; targets are centred per row first to keep it small), about 5x faster.

    Under a compiler it takes the pairwise form instead (:func:`_pairwise_quantile_huber_loss`).
    """
    n_critics, n, n_quantiles = quantiles.shape
    if torch.compiler.is_compiling():
        return _pairwise_quantile_huber_loss(quantiles, targets)
    n_targets = targets.shape[1]
    center = targets.detach().mean(dim=1, keepdim=True)
    t = targets.detach() - center
    if not targets_sorted:
        t = t.sort(dim=1).values
    k = n_critics * n_quantiles
    q = (quantiles - center).transpose(0, 1).reshape(n, k)  # (batch, critics * quantiles)
    zero = t.new_zeros(n, 1)
    prefix_t = torch.cat([zero, t.cumsum(dim=1)], dim=1)  # prefix_t[:, j] = sum of the j smallest targets
    prefix_t2 = torch.cat([zero, t.square().cumsum(dim=1)], dim=1)
    q_const = q.detach()
    ends = torch.searchsorted(t, torch.cat([q_const - 1.0, q_const, q_const + 1.0], dim=1))  # targets below each
    sum_t, sum_t2 = prefix_t.gather(1, ends).split(k, dim=1), prefix_t2.gather(1, ends).split(k, dim=1)
    count = ends.to(q.dtype).split(k, dim=1)

    def quadratic(lo: int, hi: int) -> torch.Tensor:  # sum of (t - q)^2 / 2 over the run between two ends
        return 0.5 * ((sum_t2[hi] - sum_t2[lo]) - 2.0 * q * (sum_t[hi] - sum_t[lo]) + (count[hi] - count[lo]) * q.square())

    below = count[0] * (q - 0.5) - sum_t[0] + quadratic(0, 1)  # targets below the atom: weight 1 - tau
    above = quadratic(1, 2) + (prefix_t[:, -1:] - sum_t[2]) - (n_targets - count[2]) * (q + 0.5)  # weight tau
    tau = ((torch.arange(n_quantiles, device=q.device, dtype=q.dtype) + 0.5) / n_quantiles).repeat(n_critics)
    return torch.lerp(below, above, tau).sum() / (n * k * n_targets)


def _pairwise_quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """:func:`quantile_huber_loss` over every (critic, row, atom, target) pair, the form a compiler should get: the
    sorted form's binary search stays an eager op (TQC's loss of 2 x 25 atoms against 46 targets, batch 256, forward
    and backward, one core: 0.6-0.8 ms compiled in the textbook pairwise form, 1.5-1.7 ms compiled in the sorted form,
    2.1-2.5 ms eager in the sorted form, 13 ms eager in the textbook pairwise one).

    The gradient is computed here, beside the loss, in the same pass over the pairs: ``d loss / d atom`` is minus the
    mean over its targets of ``w * clamp(delta, -1, 1)``, ``w = |tau - 1{delta < 0}|``, and ``huber(delta)`` is
    ``c * (delta - c / 2)`` with the same ``c = clamp(delta, -1, 1)``. Differentiated by autograd instead, the compiled
    step kept the pairs' differences in memory (2.4 MB at TQC's recipe) to read them twice more: on an AVX2 core the
    loss with its gradient took 0.53-0.58 ms compiled alone, 0.27-0.30 ms in this form. The pairs are laid out as
    (row, critic and atom, target), the critics' atoms side by side in each row: with a critic axis of their own,
    inductor merged it with the rows' in one loop and not in the other, and kept the pairs in memory between the two.
    The gradient reaches ``quantiles`` through a carrier, ``sum(quantiles * slopes)``, whose value is subtracted again
    (exactly: ``x - x`` is 0), so the loss reads as it is and differentiates as the textbook form does (to float
    rounding)."""
    n_critics, n, n_quantiles = quantiles.shape
    tau = (torch.arange(n_quantiles, dtype=quantiles.dtype, device=quantiles.device) + 0.5) / n_quantiles
    tau = tau.repeat(n_critics)[:, None]
    atoms = quantiles.detach().transpose(0, 1).reshape(n, n_critics * n_quantiles)
    delta = targets.detach()[:, None, :] - atoms[:, :, None]  # (batch, critics * quantiles, targets)
    clipped = delta.clamp(-1.0, 1.0)
    weighted = torch.where(delta < 0, 1.0 - tau, tau) * clipped
    pairs = delta.numel()
    values = (weighted * (delta - 0.5 * clipped)).sum(dim=2)
    slopes = (weighted.sum(dim=2) / -pairs).view(n, n_critics, n_quantiles).transpose(0, 1)  # d loss / d quantiles
    carrier = (quantiles * slopes).sum()
    return values.sum() / pairs + (carrier - carrier.detach())


class TQC(SAC):
    """TQC for Box action spaces (sb3-contrib's interface). ``policy_kwargs`` also take ``n_quantiles``
    (atoms per critic, default 25); see :class:`~herl.training.base.OffPolicyAlgorithm` for the rest."""

    config_class = TQCConfig
    fixed_hyperparameters = SAC.fixed_hyperparameters | {"top_quantiles_to_drop_per_net"}
    policy_options = {"n_quantiles": 25}

    @property
    def critic_outputs(self) -> int:
        return self.policy_config.options["n_quantiles"]

    @property
    def n_target_quantiles(self) -> int:
        """Atoms of the pooled next-state distribution that the target keeps."""
        arch = self.policy_config
        return arch.n_critics * (arch.options["n_quantiles"] - self.config.top_quantiles_to_drop_per_net)

    def _build(self, generator: torch.Generator) -> None:
        n_quantiles, drop = self.policy_config.options["n_quantiles"], self.config.top_quantiles_to_drop_per_net
        if n_quantiles < 1:
            raise ValueError(f"policy_kwargs n_quantiles must be >= 1, got {n_quantiles}")
        if drop >= n_quantiles:
            raise ValueError(
                f"top_quantiles_to_drop_per_net={drop} would drop every one of the n_quantiles={n_quantiles} atoms: "
                f"drop fewer (sb3-contrib's default is 2 of 25)"
            )
        super()._build(generator)

    def _critic_loss(self, x: torch.Tensor, next_x: torch.Tensor, batch: Any, next_actions: torch.Tensor,
                     next_log_prob: torch.Tensor, ent_coef: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        with torch.no_grad():
            next_z = self.critic_target(torch.cat([next_x, next_actions], dim=1))  # (critics, n, quantiles)
            pooled = next_z.transpose(0, 1).reshape(n, -1)
            # compiled, the loss is pairwise and needs the kept atoms, not their order: a partial sort (a third of a
            # full one's time at TQC's 50 atoms)
            in_order = not torch.compiler.is_compiling()
            next_z = (pooled.sort(dim=1).values[:, : self.n_target_quantiles] if in_order else
                      pooled.topk(self.n_target_quantiles, dim=1, largest=False, sorted=False).values)
            next_v = torch.addcmul(next_z, ent_coef, next_log_prob, value=-1.0)
            target = self.td_target(batch, next_v)
        # the target is increasing in the sorted atoms (gamma * (1 - done) >= 0, clipping keeps the order)
        return quantile_huber_loss(self.critic(torch.cat([x, batch.actions], dim=1)), target, targets_sorted=in_order)

    def _policy_value(self, x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The mean of every critic's atoms."""
        return self.critic(torch.cat([x, actions], dim=1), detach_params=True).mean(dim=(0, 2)).unsqueeze(1)
