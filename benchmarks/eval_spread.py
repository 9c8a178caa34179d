"""How much one evaluation of a policy varies: the same model evaluated on several disjoint sets of episodes.

A learning curve's point is one evaluation of 50 deterministic episodes; the policy's true success rate is what
infinitely many would give. This plays ``--evals`` evaluations of ``--episodes`` episodes each (seeds 0, 1, ...,
the same episodes as ``herl eval --seed K``), prints each rate, their spread, the spread a binomial draw of that
many episodes would have at the pooled rate, and the pooled rate with its 95 % Wilson interval.

Usage::

    python benchmarks/eval_spread.py runs/push/seed_2 --evals 10 --episodes 50
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from herl.run.evaluate import evaluate, find_models, load_model, wilson_interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder (seed_N) or a model file in one")
    parser.add_argument("--evals", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()

    (item,) = find_models(args.run)
    model = load_model(item.path)
    rates = []
    for seed in range(args.evals):
        result = evaluate(model, item.env, item.env_kwargs, episodes=args.episodes, deterministic=True, seed=seed,
                          name=item.name)
        rates.append(result.success_rate)
        print(f"seed {seed}: success {result.success_rate:.2f} over {args.episodes} episodes", flush=True)
    rates_array = np.array(rates)
    pooled = float(rates_array.mean())
    successes = int(round(pooled * args.evals * args.episodes))
    low, high = wilson_interval(successes, args.evals * args.episodes)
    binomial_sd = np.sqrt(pooled * (1 - pooled) / args.episodes)
    print(f"{item.path} ({model.num_timesteps:,} steps): {args.evals} evaluations of {args.episodes} episodes")
    print(f"  rates from {rates_array.min():.2f} to {rates_array.max():.2f}, standard deviation "
          f"{rates_array.std(ddof=1):.3f} (a binomial draw of {args.episodes} at the pooled rate: {binomial_sd:.3f})")
    print(f"  pooled: {pooled:.3f} over {args.evals * args.episodes} episodes, 95 % interval {low:.3f}-{high:.3f}")


if __name__ == "__main__":
    main()
