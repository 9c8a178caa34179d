"""FetchPickAndPlace-v4 with and without 100 scripted demonstrations, the same recipe otherwise.

Both variants are ``herl train`` with the fetch_pick_and_place preset's TQC + HER settings; the ``demos`` variant adds
``--demos scripted:100`` (100 episodes of herl's scripted expert recorded into the run folder, kept in the HER
buffer's own store, 1/8 of each batch, and the behaviour-cloning loss with the Q-filter, ``bc_loss_weight=1``).
Every ``--eval-freq`` env steps the deterministic policy is evaluated on ``--eval-episodes`` episodes (``herl
train``'s evaluation). ``run`` writes one CSV row per evaluation (variant, seed, step, success rate) to
``OUT/curves.csv``; ``plot`` draws the median over seeds with the min-max band and prints, for
each variant, the first step at which the median curve reaches 0.9.

The goal: with demonstrations, >= 0.9 success in at most a third of the env steps the plain recipe needs.

Usage::

    python benchmarks/demos_pick_and_place.py run --seeds 0 1 2 --steps 1000000 --out runs/demos_pnp [--jobs 2]
    python benchmarks/demos_pick_and_place.py collect runs/demos_pnp   # after runs trained one process each
    python benchmarks/demos_pick_and_place.py plot runs/demos_pnp/curves.csv --out docs/images/demos_pick_and_place.png
    python benchmarks/demos_pick_and_place.py run --seeds 0 --steps 2000 --eval-freq 1000 --eval-episodes 2 \\
        --out /tmp/check   # a quick check that it works
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

ENV = "FetchPickAndPlace-v4"
VARIANTS = ("plain", "demos")
THRESHOLD = 0.9
# The TQC table these figures were measured with: the fetch_pick_and_place preset's until session 16, which now holds
# fetch_push's recipe (action repeat 3, time feature, 3-step HER, desired goals, bfloat16; docs/benchmarks.md §18).
# Pinned here so the commands in docs/benchmarks.md keep running what they ran; --set flags given after override it.
MEASURED_TABLE = ("env.action_repeat=1", "env.time_feature=false", "n_steps=1", "her.desired_goal_share=0",
                  "policy.precision=float32", "policy.net_arch=[256,256]", "checkpoint.freq=50000")


def train_args(variant: str, seed: int, args: argparse.Namespace) -> list[str]:
    out = Path(args.out)
    command = ["train", "--env", ENV, "--algo", "tqc", "--seed", str(seed), "--timesteps", str(args.steps),
               "--run-dir", str(out / variant), "--progress", "log", "--jobs", "1",
               "--set", f"eval.freq={args.eval_freq}", "--set", f"eval.episodes={args.eval_episodes}",
               "--set", f"threads={args.threads}"]
    if variant == "demos":
        command += ["--demos", args.demos_source or f"scripted:{args.demos}"]
    return command + [x for setting in (*MEASURED_TABLE, *args.set) for x in ("--set", setting)]


def train_one(variant: str, seed: int, args: argparse.Namespace) -> None:
    from herl.cli import main

    run = Path(args.out) / variant / f"seed_{seed}"
    if (run / "summary.json").exists():
        return
    if (run / "config.json").exists():  # interrupted: continue it
        code = main(["train", "--resume", str(run), "--progress", "log"])
    else:
        code = main(train_args(variant, seed, args))
    if code != 0:
        raise SystemExit(f"training {variant} seed {seed} failed (exit status {code})")


def collect(out: Path) -> Path:
    """Every evaluation of every run under ``out`` into ``out/curves.csv``."""
    from herl.run.plot import read_progress

    rows = []
    for variant in VARIANTS:
        for run in sorted((out / variant).glob("seed_*")):
            for row in read_progress(run / "progress.csv"):
                if row.get("eval/success_rate") not in (None, ""):
                    rows.append([variant, int(run.name[len("seed_"):]), int(float(row["time/total_timesteps"])),
                                 float(row["eval/success_rate"])])
    path = out / "curves.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["variant", "seed", "step", "success_rate"])
        writer.writerows(rows)
    return path


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(variant, seed) for seed in args.seeds for variant in args.variants]
    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for future in [pool.submit(train_one, variant, seed, args) for variant, seed in jobs]:
                future.result()
    else:
        for variant, seed in jobs:
            train_one(variant, seed, args)
    print(f"wrote {collect(out)}")


def median_curves(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per variant: steps, median, min and max success over seeds (at the steps every seed has), and the seed count."""
    curves = {}
    for variant, seeds in seed_curves(path).items():
        by_step = [dict(zip(steps.tolist(), success)) for steps, success in seeds.values()]
        steps = sorted(set.intersection(*(set(c) for c in by_step)))
        values = np.array([[c[s] for s in steps] for c in by_step])
        curves[variant] = (np.array(steps), np.median(values, 0), values.min(0), values.max(0), len(seeds))
    return curves


def first_step_at(steps: np.ndarray, success: np.ndarray, threshold: float = THRESHOLD) -> int | None:
    reached = np.flatnonzero(success >= threshold)
    return int(steps[reached[0]]) if len(reached) else None


def plot(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = median_curves(Path(args.csv))
    fig, ax = plt.subplots(figsize=(7, 4))
    reached = {}
    for variant, (steps, median, low, high, n_seeds) in curves.items():
        label = {"plain": "TQC + HER", "demos": "TQC + HER + demos (BC loss, Q-filter)"}.get(variant, variant)
        ax.plot(steps, median, label=f"{label}, median of {n_seeds} seeds")
        ax.fill_between(steps, low, high, alpha=0.2)
        reached[variant] = first_step_at(steps, median)
    ax.axhline(THRESHOLD, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="env steps", ylabel="eval success rate", title=f"{ENV}: learning with and without demonstrations",
           ylim=(-0.02, 1.02))
    ax.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    for variant, step in reached.items():
        last = int(curves[variant][0][-1])
        print(f"{variant}: median success >= {THRESHOLD} first at " + (f"{step:,} steps" if step else f"none by {last:,}"))
    for variant, seeds in seed_curves(Path(args.csv)).items():
        firsts = {seed: first_step_at(*curve) for seed, curve in sorted(seeds.items())}
        print(f"{variant}, each seed's first step at >= {THRESHOLD}: " + ", ".join(
            f"seed {seed} {step:,}" if step else f"seed {seed} none by {int(seeds[seed][0][-1]):,}" for seed, step in firsts.items()))
    demos, plain = reached.get("demos"), reached.get("plain")
    if demos and plain:
        print(f"demos need {demos / plain:.2f} of the plain recipe's steps (goal: <= 0.33)")
    elif demos and "plain" in curves:  # the plain recipe needs more than it ran: the ratio is below demos / its last step
        last = int(curves["plain"][0][-1])
        print(f"demos need less than {demos / last:.2f} of the plain recipe's steps (it had not reached "
              f"{THRESHOLD} by {last:,}; goal: <= 0.33)")


def seed_curves(path: Path) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per variant and seed: that seed's steps and success rates."""
    out: dict[str, dict[int, dict[int, float]]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            out.setdefault(row["variant"], {}).setdefault(int(row["seed"]), {})[int(row["step"])] = float(row["success_rate"])
    return {variant: {seed: (np.array(sorted(c)), np.array([c[k] for k in sorted(c)])) for seed, c in seeds.items()}
            for variant, seeds in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    r = commands.add_parser("run", help="train both variants for each seed, then write OUT/curves.csv")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    r.add_argument("--out", default="runs/demos_pick_and_place")
    r.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    r.add_argument("--demos", type=int, default=100,
                   help="scripted expert episodes, recorded into each run folder (`herl train --demos scripted:N`: "
                        "their env seeds follow the run's seed, so every seed has its own demonstrations)")
    r.add_argument("--demos-source", default=None, metavar="DIR",
                   help="a recorded dataset (herl record) to use in every run instead")
    r.add_argument("--eval-freq", type=int, default=10_000)
    r.add_argument("--eval-episodes", type=int, default=50)
    r.add_argument("--threads", type=int, default=1, help="torch threads per run (the preset's 2 suit one run alone)")
    r.add_argument("--jobs", type=int, default=1, help="runs trained in parallel processes")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to herl train")
    r.set_defaults(func=run)
    c = commands.add_parser("collect", help="write OUT/curves.csv from the runs under OUT (runs trained separately, "
                                          "e.g. one process per seed)")
    c.add_argument("out")
    c.set_defaults(func=lambda args: print(f"wrote {collect(Path(args.out))}"))
    p = commands.add_parser("plot", help="median curves with min-max bands, and the steps to 0.9 success")
    p.add_argument("csv")
    p.add_argument("--out", default="demos_pick_and_place.png")
    p.set_defaults(func=plot)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
