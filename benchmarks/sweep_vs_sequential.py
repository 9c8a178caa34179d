"""Four seeds of the FetchReach preset: a sweep on Ray Tune against the same four runs one after another.

Runs ``herl train --env FetchReach-v4 --seed S`` for each seed in turn, then
``herl sweep --env FetchReach-v4 --seeds N`` (a local Ray with ``--cpus``), each as a subprocess, and reports both
wall-clock times and the final success rates (the same settings, so the same learning; only the wall clock
differs). Needs an idle machine with at least as many cores as seeds for a fair number.

Usage::

    python benchmarks/sweep_vs_sequential.py [--seeds 4] [--cpus 4] [--timesteps 5000] [--out /tmp/sweep_bench]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def timed(command: list[str]) -> float:
    print("$", " ".join(command), flush=True)
    tic = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs of the sweep's local Ray")
    parser.add_argument("--timesteps", type=int, default=None, help="default: the preset's (5,000)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/sweep_bench"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    herl = [sys.executable, "-m", "herl"]
    steps = ["--timesteps", str(args.timesteps)] if args.timesteps else []
    print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    sequential = sum(timed([*herl, "train", "--env", "FetchReach-v4", *steps, "--seed", str(seed), "--progress", "off",
                            "--run-dir", str(args.out / "sequential" / f"s{seed}")]) for seed in range(args.seeds))
    swept = timed([*herl, "sweep", "--env", "FetchReach-v4", *steps, "--seeds", str(args.seeds), "--cpus",
                   str(args.cpus), "--sweep-dir", str(args.out / "sweep")])
    seq_success = [json.loads(p.read_text())["final_success"]
                   for p in sorted((args.out / "sequential").glob("s*/seed_*/summary.json"))]
    with open(args.out / "sweep" / "summary.csv", newline="") as f:
        sweep_success = [float(r["final eval/success_rate"]) for r in csv.DictReader(f)]
    print(f"sequential: {sequential:.0f} s, final success {seq_success}")
    print(f"sweep:      {swept:.0f} s, final success {sorted(sweep_success)} ({sequential / swept:.2f}x faster)")


if __name__ == "__main__":
    main()
