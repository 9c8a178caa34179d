#!/usr/bin/env bash
# The fetch_push preset on one GPU box, envs on the cores and updates on the GPU: seeds 0-2 at once, each with 4
# FetchPush envs in their own processes (vector_env=async), one update per transition collected (gradient_steps=-1:
# the update rate per env step of the one-env preset) and the update compiled (CUDA graphs), to 50,000 decisions
# (150k env steps). Prints when each seed's evaluation first reached 0.9, and the whole evaluation curve.
# About 6 minutes on an H100 box of 16 cores, if the aim (0.9 by 150k env steps within 5 minutes) holds.
#
# Usage, from the repository root: bash benchmarks/gpu_push_recipe.sh [OUT_DIR]   (default $OUT, else /tmp/gpu_push)
# A machine without gymnasium-robotics takes it from .whl/ (benchmarks/gpu_env.sh says how to make it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-/tmp/gpu_push}}
mkdir -p "$OUT_DIR"
source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
timeout 420 "$PY" -m herl train --env FetchPush-v4 --device cuda --seed 0 1 2 --jobs 3 --threads 1 --timesteps 50000 \
    --n-envs 4 --set vector_env=async --set gradient_steps=-1 --set compile=true --progress off \
    --run-dir "$OUT_DIR/push" 2>&1 | grep -v "AdroitHand" | tail -8
"$PY" benchmarks/first_success.py "$OUT_DIR/push"
echo "total $SECONDS s"
