"""Does a trained critic say the same thing in bfloat16 as in float32? Q-values and the actor's gradient, compared.

``policy.precision=bfloat16`` rounds the inputs of the hidden layers' matmuls to 8 bits of mantissa. What the
actor learns from is the critic's gradient with respect to the action, so this loads a checkpoint of a run
(``model.zip`` and ``replay_buffer.zip``, as ``herl train`` writes them under ``checkpoints/step_*``) with the env
its run made (the run's ``config.json``: env id, action repeat, time feature), draws a batch
from its buffer (with hindsight goals, as an update does), takes the actor's deterministic actions, and evaluates
the critic's mean value and its action gradient once with float32 matmuls and once with bfloat16 ones. It prints the
mean and largest Q difference, and the cosine similarity and relative error of the gradients.

Usage::

    python benchmarks/precision_check.py runs/push/seed_0/checkpoints/step_000000051000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from herl.nn.mlp import set_precision
from herl.run.envs import make_env
from herl.run.train import read_config
from herl.training.base import OffPolicyAlgorithm


def critic_and_gradient(model, x: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    actions = actions.clone().requires_grad_(True)
    value = model.critic(torch.cat([x, actions], dim=1))  # (critics, batch, outputs)
    (grad,) = torch.autograd.grad(value.mean(dim=(0, 2)).sum(), actions)
    return value.detach().mean(dim=(0, 2)), grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a run's checkpoint: RUN/checkpoints/step_N")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    config = read_config(args.checkpoint.parent.parent)
    model = OffPolicyAlgorithm.load(args.checkpoint / "model.zip", env=make_env(config.env, dict(config.env_kwargs)))
    model.load_replay_buffer(args.checkpoint / "replay_buffer.zip")
    torch.manual_seed(args.seed)
    batch = model.replay_buffer.sample(args.batch)
    n = batch.rewards.shape[0]
    with torch.no_grad():
        x = model.encode_batch(batch)[:n]
        actions = model._act(x, deterministic=True)
    results = {}
    for precision in ("float32", "bfloat16"):
        set_precision(model.critic, precision)
        results[precision] = critic_and_gradient(model, x, actions)
    (q32, g32), (q16, g16) = results["float32"], results["bfloat16"]
    cos = torch.nn.functional.cosine_similarity(g32, g16, dim=1)
    rel = (g32 - g16).norm(dim=1) / g32.norm(dim=1).clamp_min(1e-12)
    print(f"{args.checkpoint}: {n} sampled transitions, float32 mean Q {q32.mean():.3f}")
    print(f"Q difference: mean {(q32 - q16).abs().mean():.4f}, largest {(q32 - q16).abs().max():.4f}")
    print(f"action gradient, bfloat16 against float32: cosine mean {cos.mean():.4f}, median {cos.median():.4f}, "
          f"10th percentile {cos.quantile(0.1):.4f}; relative error median {rel.median():.4f}")


if __name__ == "__main__":
    main()
