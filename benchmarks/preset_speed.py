"""Decisions per second of a preset while it learns, against variants of it, taking turns in one process.

Each variant is the preset with some ``--set`` settings changed (``--variant NAME KEY=VALUE [KEY=VALUE ...]``); the
preset as shipped is always the first. Every model is built as ``herl train`` builds it (the preset's env wrappers,
HER settings and networks) and learns past ``learning_starts``; then each round every variant learns ``--chunk``
decisions in turn. Prints decisions/s per round and over all rounds, and each variant's ratio to the preset.

    python benchmarks/preset_speed.py --env FetchPush-v4 --set policy.precision=float32 \\
        --variant "critics [512, 512]" 'policy.net_arch={pi=[512,512,512],qf=[512,512]}' --chunk 300 --rounds 5

Run it under ``bash benchmarks/avx2_only.sh --switches`` for a CPU held to AVX2. ``--threads`` as the preset's run
(its ``threads`` setting, 2 for ``fetch_push``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from herl.run.config import build_config, parse_assignment
from herl.run.envs import make_training_env
from herl.run.presets import preset_for_env
from herl.run.train import build_model


def build(env_id: str, changes: list[str], seed: int):
    preset = preset_for_env(env_id)
    layers = [*preset.layers(preset.algo), ("--set", dict(parse_assignment(c) for c in changes))]
    config = build_config(algo=preset.algo, env=env_id, seed=seed, goal_env=True, preset=preset.name, layers=layers)
    env = make_training_env(config.env, config.env_kwargs, config.n_envs, config.vector_env)
    return build_model(config, env), config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="FetchPush-v4")
    parser.add_argument("--set", dest="common", action="append", default=[], metavar="KEY=VALUE",
                        help="a change for every variant, the preset too (e.g. policy.precision=float32)")
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
                        help="a variant: its name, then its changes to the preset")
    parser.add_argument("--chunk", type=int, default=300, help="decisions each variant learns in a turn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {"preset": [], **{v[0]: v[1:] for v in args.variant}}
    models = {}
    for name, changes in variants.items():
        model, config = build(args.env, [*args.common, *changes], args.seed)
        start = model.config.learning_starts + args.chunk  # past the random steps, and the first updates (and any compiling)
        model.learn(start, reset_num_timesteps=False)
        models[name] = model
        print(f"{name}: {config.policy.to_policy_kwargs()['net_arch']}, precision {model.policy_config.precision}",
              flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for turn in range(args.rounds):
        for name, model in models.items():
            t = time.perf_counter()
            model.learn(args.chunk, reset_num_timesteps=False)
            seconds[name].append(time.perf_counter() - t)
        print(f"[{turn}] " + ", ".join(f"{n} {args.chunk / s[-1]:.1f}" for n, s in seconds.items()), flush=True)
    rates = {name: args.chunk * len(s) / sum(s) for name, s in seconds.items()}
    base = rates["preset"]
    print(f"decisions/s over {args.rounds} x {args.chunk}, {args.threads} thread(s):")
    for name, rate in rates.items():
        per_round = [seconds["preset"][i] / s for i, s in enumerate(seconds[name])]
        print(f"  {name}: {rate:.2f} ({rate / base:.2f}x the preset; per round median {statistics.median(per_round):.2f}, "
              f"{min(per_round):.2f}-{max(per_round):.2f})")


if __name__ == "__main__":
    main()
