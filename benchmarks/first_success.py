"""For each seed of the given run folders: the first evaluation at or above a success rate (env steps, seconds of
training) and the whole evaluation curve, read from the seeds' progress.csv.

    python benchmarks/first_success.py RUN_DIR [RUN_DIR ...] [--at 0.9]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--at", type=float, default=0.9, help="the success rate to reach")
    args = parser.parse_args()
    for run in args.runs:
        for progress in sorted(run.glob("seed_*/progress.csv")):
            with progress.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if r.get("eval/success_rate")]
            hit = next((r for r in rows if float(r["eval/success_rate"]) >= args.at), None)
            curve = " ".join(f"{int(float(r['time/total_timesteps'])):,}:{float(r['eval/success_rate']):.2f}"
                             for r in rows)
            when = (f"{args.at:g} at {int(float(hit['time/total_timesteps'])):,} steps, "
                    f"{float(hit['time/wall_time']):.0f} s" if hit else f"never {args.at:g}")
            print(f"{progress.parent}: {when}; evaluations {curve}")


if __name__ == "__main__":
    main()
