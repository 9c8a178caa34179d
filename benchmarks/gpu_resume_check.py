"""A `herl train` run on CUDA, killed with SIGKILL after a checkpoint and resumed, against the same run never interrupted
(part of benchmarks/gpu_check.sh).

Usage: python benchmarks/gpu_resume_check.py OUT_DIR [--algo sac] [--device cpu]

Both runs train SAC + HER on PointReach (continuous actions: fused Adam with loaded optimizer states, the step that
failed on CUDA before) and DQN + HER on bit flipping. Prints, per algorithm, the step the kill came at, and the largest
weight difference between the resumed and the uninterrupted run (0 where CUDA's kernels are deterministic); exits 1
if a resume fails or the runs differ by more than float32 rounding can explain.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from herl.run.checkpoint import latest_checkpoint
from herl.training.base import OffPolicyAlgorithm

RUNS = {
    "sac": ["--env", "herl/PointReach-v0", "--algo", "sac", "--timesteps", "1500", "--set", "learning_starts=100",
            "--set", "policy.net_arch=[64,64]", "--set", "batch_size=64"],
    "dqn": ["--env", "herl/BitFlipping-v0", "--timesteps", "1500", "--set", "env.n_bits=8",
            "--set", "learning_starts=100", "--set", "policy.net_arch=[64,64]", "--set", "batch_size=64"],
}
COMMON = ["--progress", "off", "--set", "checkpoint.freq=150", "--set", "eval.freq=500",
          "--set", "eval.episodes=5"]


def herl(*args: str) -> list[str]:
    return [sys.executable, "-m", "herl", "train", *args]


def check(algo: str, out: Path, device: str) -> bool:
    args = [*RUNS[algo], *COMMON, "--device", device]
    whole, killed = out / f"{algo}_whole", out / f"{algo}_killed"
    for folder in (whole, killed):
        shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(herl(*args, "--run-dir", str(whole)), check=True)
    process = subprocess.Popen(herl(*args, "--run-dir", str(killed)), stdout=subprocess.DEVNULL)
    run = killed / "seed_0"
    deadline = time.monotonic() + 120
    while (checkpoint := latest_checkpoint(run)) is None or checkpoint.step < 300:
        if process.poll() is not None or time.monotonic() > deadline:
            print(f"{algo}: the run ended or stalled before its checkpoint at 300")
            return False
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = latest_checkpoint(run).step
    resumed = subprocess.run(herl("--resume", str(killed), "--progress", "off"))
    if resumed.returncode != 0 or (run / "model.zip").exists() is False:
        print(f"{algo}: herl train --resume failed (rc {resumed.returncode})")
        return False
    a = OffPolicyAlgorithm.load(whole / "seed_0" / "model.zip", device="cpu")
    b = OffPolicyAlgorithm.load(run / "model.zip", device="cpu")
    worst = 0.0
    for name, state in a.get_parameters().items():
        if not name.endswith(".optimizer"):
            for key, tensor in state.items():
                worst = max(worst, float((tensor.double() - b.get_parameters()[name][key].double()).abs().max()))
    same_counts = (a.num_timesteps, a._n_updates) == (b.num_timesteps, b._n_updates)
    print(f"{algo}: killed at step {killed_at}, resumed to {b.num_timesteps}; counters equal: {same_counts}; "
          f"largest weight difference from the uninterrupted run: {worst:.3g}")
    return same_counts and worst < 1e-2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--algo", choices=sorted(RUNS), action="append")
    parser.add_argument("--device", default="cuda", help="cuda (the check); cpu tries the script itself anywhere")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA here")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = [check(algo, args.out, args.device) for algo in (args.algo or sorted(RUNS))]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
