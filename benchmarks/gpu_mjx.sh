#!/usr/bin/env bash
# MJXPush on one GPU (herl/MJXPush-v0: a cube pushed over a table in MuJoCo MJX, every env one MJX simulation):
#   1. env steps per minute end to end (MJX steps, HER on the device, updates) at 4,096 envs;
#   2. the mjx_push preset (256 envs, 1/8 update per env step), seeds 0-2 at once: when each passed 0.9 success;
#   3. 2,048 envs with 1/32 update per env step at batch 2,048, seed 0: when it passed 0.9.
# Prints one line per run with the first evaluation at >= 0.9 (env steps, seconds). About 8 minutes on an H100.
#
# Usage, from the repository root: bash benchmarks/gpu_mjx.sh [OUT_DIR]   (default $OUT, else /tmp/gpu_mjx)
# Needs mujoco, mujoco-mjx and trimesh; a machine without them takes them from .whl/ (benchmarks/gpu_env.sh says how
# to make them).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-/tmp/gpu_mjx}}
mkdir -p "$OUT_DIR"
GPU_NEEDS="mujoco.mjx, gymnasium" source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
echo "== throughput"
timeout 150 "$PY" benchmarks/batched_throughput.py --env herl/MJXPush-v0 --device cuda --n-envs 4096 --steps 2000000 \
    --warmup 400000 --batch-size 2048 --updates-per-step 0.004 2>&1 | grep -v "^Failed to import"
echo "== preset, seeds 0-2 at once"
timeout 240 "$PY" -m herl train --env herl/MJXPush-v0 --device cuda --seed 0 1 2 --jobs 3 --timesteps 204800 \
    --progress off --run-dir "$OUT_DIR/preset" 2>&1 | grep -v "^Failed to import" | tail -6
"$PY" benchmarks/first_success.py "$OUT_DIR/preset"
echo "== 2,048 envs"
timeout 150 "$PY" -m herl train --env herl/MJXPush-v0 --device cuda --n-envs 2048 --seed 0 --timesteps 1024000 \
    --set batched.updates_per_step=0.03125 --set batch_size=2048 --set learning_starts=40960 --set eval.freq=102400 \
    --progress off --run-dir "$OUT_DIR/wide" 2>&1 | grep -v "^Failed to import" | tail -4
"$PY" benchmarks/first_success.py "$OUT_DIR/wide"
echo "total $SECONDS s"
