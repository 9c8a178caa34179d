#!/usr/bin/env bash
# The fetch_push_many_envs preset on one GPU box: seeds 0-2 at once, each with its 1,024 FetchPush envs stepped in its
# own process (one core each) and 64 updates of batch 1,024 after each step of all of them, the update compiled
# (CUDA graphs), to 256,000 env steps. Prints when each seed's evaluation first reached 0.9, and the whole curve.
# On the 2-core CPU the preset passed 0.9 at 204,800-256,000 env steps in about 7.4 minutes; here the updates should
# cost little beside the envs (~1 s a round of 1,024 env steps), about 5 minutes a seed. Each run holds ~10 GB.
#
# Usage, from the repository root: bash benchmarks/gpu_push_many_envs.sh [OUT_DIR]   (default $OUT, else /tmp/gpu_many)
# A machine without gymnasium-robotics takes it from .whl/ (benchmarks/gpu_env.sh says how to make it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-/tmp/gpu_many}}
mkdir -p "$OUT_DIR"
source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
timeout 450 "$PY" -m herl train --env FetchPush-v4 --preset fetch_push_many_envs --device cuda --seed 0 1 2 --jobs 3 \
    --threads 1 --timesteps 256000 --set compile=true --progress off --run-dir "$OUT_DIR/many" 2>&1 \
    | grep -v "AdroitHand" | tail -8
"$PY" benchmarks/first_success.py "$OUT_DIR/many"
echo "total $SECONDS s"
