#!/usr/bin/env bash
# A FetchPush preset on one GPU box, envs on the cores and updates on the GPU (compiled: CUDA graphs), seeds 0-2 at
# once. Prints when each seed's evaluation first reached 0.9, and the whole evaluation curve.
#
# Default: the fetch_push preset, each seed with 4 FetchPush envs in their own processes (vector_env=async), one update
# per transition collected (gradient_steps=-1: the update rate per env step of the one-env preset), to 50,000
# decisions (150k env steps). About 6 minutes on an H100 box of 16 cores, if the aim (0.9 by 150k env steps within 5
# minutes) holds.
#
# --many-envs: the fetch_push_many_envs preset, each seed with its 1,024 envs split over 5 processes (vector_env=async,
# env_processes=5: 15 of the 16 cores for the three seeds) and 64 updates of batch 1,024 after each step of all of
# them, to 256,000 env steps. On the 2-core CPU it passed 0.9 at 204,800-256,000 env steps in about 7.4 minutes, the
# envs stepped in the training process; here the updates should cost little beside the envs. Each run should hold
# ~3-4 GB (estimated: ~0.3 GB of herl and torch per process, 1,024 envs ~1 GB, the buffer).
#
# Usage, from the repository root: bash benchmarks/gpu_push_recipe.sh [--many-envs] [OUT_DIR]
#   (default OUT_DIR: $OUT, else /tmp/gpu_push)
# A machine without gymnasium-robotics takes it from .whl/ (benchmarks/gpu_env.sh says how to make it).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--many-envs" ]; then
    shift
    NAME=many LIMIT=450
    RECIPE=(--preset fetch_push_many_envs --timesteps 256000 --set vector_env=async --set env_processes=5)
else
    NAME=push LIMIT=420
    RECIPE=(--timesteps 50000 --n-envs 4 --set vector_env=async --set gradient_steps=-1)
fi
OUT_DIR=${1:-${OUT:-/tmp/gpu_push}}
mkdir -p "$OUT_DIR"
source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
timeout "$LIMIT" "$PY" -m herl train --env FetchPush-v4 --device cuda --seed 0 1 2 --jobs 3 --threads 1 "${RECIPE[@]}" \
    --set compile=true --progress off --run-dir "$OUT_DIR/$NAME" 2>&1 | grep -v "AdroitHand" | tail -8
"$PY" benchmarks/first_success.py "$OUT_DIR/$NAME"
echo "total $SECONDS s"
