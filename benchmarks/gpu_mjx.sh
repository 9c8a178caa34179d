#!/usr/bin/env bash
# The MJX envs on one GPU, every env one MJX simulation, HER and the updates on the device too:
#   1. MJXFetchPush (FetchPush with Fetch's arm, herl/MJXFetchPush-v0): env steps per minute end to end at 4,096 envs
#      (SAC [256, 256, 256], batch 1,024, 1/16 update per env step);
#   2. the mjx_fetch_push preset with its update compiled (CUDA graphs), seed 0, for up to 4 minutes: its evaluations
#      (does it learn, and how fast);
#   3. MJXPush (herl/MJXPush-v0) with 2,048 envs and 1/32 update per env step at batch 2,048, seed 0: when it passed
#      0.9 (the mjx_push preset itself, 256 envs, was measured: docs/batched.md).
# Prints the throughput table, then one line per run with the first evaluation at >= 0.9 and the evaluation curve.
# At most 8 minutes on an H100 (each part has its time limit).
#
# Usage, from the repository root: bash benchmarks/gpu_mjx.sh [OUT_DIR]   (default $OUT, else /tmp/gpu_mjx)
# Needs mujoco, mujoco-mjx, trimesh and gymnasium-robotics; a machine without them takes them from .whl/
# (benchmarks/gpu_env.sh says how to make them).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-/tmp/gpu_mjx}}
mkdir -p "$OUT_DIR"
GPU_NEEDS="mujoco.mjx, gymnasium, gymnasium_robotics" source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
quiet() { grep -v -e "^Failed to import" -e "^AdroitHand"; }
echo "== MJXFetchPush throughput"
timeout 120 "$PY" benchmarks/batched_throughput.py --env herl/MJXFetchPush-v0 --device cuda --n-envs 4096 \
    --steps 245760 --warmup 40960 --batch-size 1024 --updates-per-step 0.0625 --net-arch 256 256 256 2>&1 | quiet
echo "== mjx_fetch_push preset, seed 0, up to 4 minutes"
timeout 240 "$PY" -m herl train --env herl/MJXFetchPush-v0 --device cuda --seed 0 --progress off --set compile=true \
    --set eval.freq=61440 --run-dir "$OUT_DIR/fetch" 2>&1 | quiet | tail -4
"$PY" benchmarks/first_success.py "$OUT_DIR/fetch"
echo "== MJXPush, 2,048 envs"
timeout 100 "$PY" -m herl train --env herl/MJXPush-v0 --device cuda --n-envs 2048 --seed 0 --timesteps 1024000 \
    --set batched.updates_per_step=0.03125 --set batch_size=2048 --set learning_starts=40960 --set eval.freq=102400 \
    --progress off --run-dir "$OUT_DIR/wide" 2>&1 | quiet | tail -4
"$PY" benchmarks/first_success.py "$OUT_DIR/wide"
echo "total $SECONDS s"
