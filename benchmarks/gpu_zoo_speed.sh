#!/usr/bin/env bash
# The zoo's TQC+HER recipe on FetchPush-v4 ([512]*3, batch 2048, one update per env step) on one GPU: where the time
# of a compiled run goes, and which settings raise env steps/s while learning. Each line prints its own table or
# median; compile time is paid in each run's warm-up, outside the timed steps.
#
# Usage, from the repository root on a CUDA machine: bash benchmarks/gpu_zoo_speed.sh   (about 6 minutes on an H100;
# a machine without gymnasium-robotics takes it from .whl/ as benchmarks/gpu_env.sh says)
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
export PYTHONWARNINGS=ignore
ZOO=(--device cuda --net-arch 512 512 512 --batch-size 2048 --warmup 80 --repeats 1)
run() { echo "== $*"; timeout 150 "$PY" "$@" 2>&1 | grep -v "AdroitHand\|^# torch"; }
# where an env step's time goes: host time per part of the loop, GPU busy time and top kernels (compiled, 16 envs)
(cd benchmarks && run step_profile.py --device cuda --compile --n-envs 16 --steps 1600)
# the update alone, eager against compiled, in float32 and with bfloat16 hidden layers
run benchmarks/compiled_update.py --device cuda --algo tqc --net 512 512 512 --batch 2048 --precision float32 bfloat16 \
    --updates 100 --rounds 3
# the same with float32 products in TF32 on the tensor cores (JAX's default there; herl's is full float32)
run benchmarks/compiled_update.py --device cuda --algo tqc --net 512 512 512 --batch 2048 --precision float32 --tf32 \
    --updates 100 --rounds 3
# 8 envs in their own processes, compiled: float32 against bfloat16
run benchmarks/fetch_tqc.py speed "${ZOO[@]}" --steps 800 --n-envs 8 --variants herl-float32-compiled herl-bfloat16-compiled
# the replay buffer on the GPU (HER sampling there too)
run benchmarks/fetch_tqc.py speed "${ZOO[@]}" --steps 800 --n-envs 8 --storage-device cuda --variants herl-bfloat16-compiled
# 16 envs
run benchmarks/fetch_tqc.py speed "${ZOO[@]}" --steps 1600 --n-envs 16 --storage-device cuda --variants herl-bfloat16-compiled
echo "total $SECONDS s"
