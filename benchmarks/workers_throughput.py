"""Throughput of many-worker collection (``herl train --workers N``) on FetchReach, and a model of how it scales.

For N = 0 (the envs stepped in the training process), 1, 2, ... Ray actors, it trains SAC + HER with the
FetchReach preset's settings (one update per env step) for ``--steps`` env steps after ``learning_starts`` and
reports env steps collected per second and updates per second. With workers it also measures, per episode:

- ``actor``: an actor's time to play one episode (acting with the policy and stepping MuJoCo);
- ``transfer``: the learner's time to get it from Ray's object store (``ray.get``);
- ``store``: the learner's time to add it to the HER buffer;
- ``update``: the learner's time per update (times the update-to-data ratio per env step).

The model: actors collect ``N / actor_per_step`` steps/s (one core each); the learner consumes at most
``1 / (transfer + store + utd * update)`` steps/s (per step). Throughput is the smaller of the two, so a learner
can feed ``N* = actor_per_step / learner_per_step`` workers before it becomes the bottleneck; on a machine with C
cores, N <= C - 1 (one core for the learner).

Usage::

    python benchmarks/workers_throughput.py [--workers 0 1 2] [--steps 2000] [--utd 1.0]

Measured numbers, with the command and the machine's load, are in docs/scaling.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

ENV_ID = "FetchReach-v4"
EPISODE = 50  # FetchReach's time limit


def build(seed: int, train_freq: int):
    from herl.run.config import build_config
    from herl.run.presets import get_preset
    from herl.run.train import build_model
    from herl.run.envs import make_training_env

    preset = get_preset("fetch_reach")
    config = build_config(algo="sac", env=ENV_ID, seed=seed, goal_env=True, preset="fetch_reach",
                          layers=[*preset.layers("sac"), ("benchmark", {"train_freq": train_freq,
                                                                         "gradient_steps": 1})])
    env = make_training_env(config.env, dict(config.env_kwargs), 1)
    return build_model(config, env), config


def measure(workers: int, steps: int, train_freq: int, seed: int) -> dict[str, float]:
    model, config = build(seed, train_freq)
    warmup = config.hyperparameters.get("learning_starts", 100)
    total = warmup + steps
    # First fill the buffer past learning_starts without timing (random actions, no updates).
    model.learn(warmup, log_interval=None)
    start_steps, start_updates = model.num_timesteps, model._n_updates
    stats = None
    tic = time.perf_counter()
    if workers == 0:
        model.learn(steps, log_interval=None, reset_num_timesteps=False)
    else:
        from herl.distributed.workers import WorkerStats, learn

        stats = WorkerStats()
        learn(model, steps, env_id=ENV_ID, workers=workers, log_interval=None, reset_num_timesteps=False, stats=stats)
    seconds = time.perf_counter() - tic
    out = {"workers": workers, "steps_per_s": (model.num_timesteps - start_steps) / seconds,
           "updates_per_s": (model._n_updates - start_updates) / seconds, "seconds": seconds, "total": total}
    if stats is not None and stats.episodes:
        per_episode = {name: getattr(stats, f"{name}_seconds") / stats.episodes
                       for name in ("actor", "transfer", "store", "wait")}
        out.update({f"{k}_ms_per_episode": 1e3 * v for k, v in per_episode.items()})
        out["update_ms"] = 1e3 * stats.update_seconds / max(stats.updates, 1)
        out["broadcast_ms"] = 1e3 * stats.broadcast_seconds / max(stats.broadcasts, 1)
        out["steps_per_episode"] = stats.steps / stats.episodes
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2000, help="env steps timed (after learning_starts)")
    parser.add_argument("--train-freq", type=int, default=1, help="env steps per update (1: the preset's UTD of 1)")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}; torch {torch.__version__}; UTD 1/{args.train_freq}")
    import ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="warning")
    try:
        results = [measure(n, args.steps, args.train_freq, args.seed) for n in args.workers]
    finally:
        ray.shutdown()
    print(f"{'workers':>7}  {'env steps/s':>11}  {'updates/s':>9}  {'actor ms/ep':>11}  {'transfer ms/ep':>14}  "
          f"{'store ms/ep':>11}  {'update ms':>9}  {'learner waits ms/ep':>19}")
    for r in results:
        extra = [r.get(k) for k in ("actor_ms_per_episode", "transfer_ms_per_episode", "store_ms_per_episode",
                                    "update_ms", "wait_ms_per_episode")]
        cells = ["-" if v is None else f"{v:.1f}" for v in extra]
        print(f"{r['workers']:>7}  {r['steps_per_s']:>11.1f}  {r['updates_per_s']:>9.1f}  {cells[0]:>11}  "
              f"{cells[1]:>14}  {cells[2]:>11}  {cells[3]:>9}  {cells[4]:>19}")
    measured = [r for r in results if "actor_ms_per_episode" in r]
    if measured:
        a = np.mean([r["actor_ms_per_episode"] for r in measured]) / EPISODE
        transfer = np.mean([r["transfer_ms_per_episode"] + r["store_ms_per_episode"] for r in measured]) / EPISODE
        update = np.mean([r["update_ms"] for r in measured]) / args.train_freq
        learner = transfer + update
        print(f"\nmodel (per env step): actor {a:.2f} ms, learner {learner:.2f} ms "
              f"(transfer + store {transfer:.2f} ms, updates {update:.2f} ms)")
        print(f"throughput(N) = min(N / {a:.2f} ms, 1 / {learner:.2f} ms) = min({1e3 / a:.0f} N, {1e3 / learner:.0f}) "
              f"env steps/s; a learner feeds N* = {a / learner:.1f} workers")
        for n in (1, 2, 4, 8, 16, 32):
            print(f"  N={n:>2}: {min(n * 1e3 / a, 1e3 / learner):8.0f} env steps/s")


if __name__ == "__main__":
    main()
