#!/usr/bin/env bash
# The GPU check: everything herl claims on CUDA, in one script of at most 8 minutes on one GPU.
#
#   1. the CUDA tests (every test that skips without CUDA), the round-trip matrix on CUDA included: save, load,
#      predict and train on for every algorithm and setting, and models crossing between the CPU and CUDA;
#   2. a CLI run on CUDA killed with SIGKILL after a checkpoint and resumed (`herl train --resume`), compared with the
#      same run never interrupted;
#   3. the first 3,000 decisions of the fetch_push preset on CUDA, timed (decisions/s);
#   4. batched goal envs on the device (herl.batched): env steps per minute end to end, SAC + HER on
#      BatchedPointReach at 16,384 envs;
#   5. the compiled update on CUDA (compile=True: CUDA graphs): its test against the eager update for TQC with HER,
#      then its time per update against the eager one's for TQC at the zoo's size ([512]*3, batch 2048) and at
#      [256, 256], batch 256 (benchmarks/compiled_update.py).
#
# Usage, from the repository root: bash benchmarks/gpu_check.sh [OUT_DIR]   (default $OUT, else /tmp/gpu_check)
# It prints one PASS/FAIL line per part and writes the log to OUT_DIR/gpu_check.log; record the result with the
# date in docs/benchmarks.md ("GPU check").
#
# A machine whose Python lacks gymnasium, gymnasium-robotics or mujoco takes them as wheels from .whl/ (made where
# pip can reach the package index, for that machine's Python, e.g. 3.12):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     gymnasium==1.4.0 farama-notifications==0.0.6 gymnasium-robotics==1.4.2 mujoco==3.11.0 pettingzoo glfw pyopengl
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable  # no rendering here; EGL may be absent
if ! "$PY" -c "import gymnasium, gymnasium_robotics, mujoco" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
status=0
part() {  # part NAME COMMAND...: run it, log it, print PASS or FAIL with its time
    local name=$1 start=$SECONDS rc
    shift
    echo "== $name: $*" >>"$LOG"
    "$@" >>"$LOG" 2>&1
    rc=$?
    printf '%s %s (%ds)\n' "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$name" $((SECONDS - start)) | tee -a "$LOG"
    [ $rc -eq 0 ] || status=1
}

: >"$LOG"
"$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee -a "$LOG"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'" || exit 2

# 1. every test that needs CUDA (they skip elsewhere), and the round-trip matrix's CUDA half
part "cuda tests" timeout 300 "$PY" -m pytest -q -p no:warnings -p no:cacheprovider -o addopts="" \
    tests/io/test_round_trip_matrix.py tests/buffers/test_storage_device.py tests/buffers/test_her_sampling.py \
    tests/nn/test_precision.py tests/batched -k "cuda or CUDA"

# 2. a CUDA run killed after a checkpoint and resumed, against the same run never interrupted
part "cli resume on cuda" timeout 240 "$PY" benchmarks/gpu_resume_check.py "$OUT_DIR/resume"

# 3. the fetch_push preset's first 3,000 decisions on CUDA
start=$SECONDS
part "fetch_push 3000 decisions" timeout 300 "$PY" -m herl train --env FetchPush-v4 --device cuda --timesteps 3000 \
    --set eval.freq=100000 --set checkpoint.freq=100000 --progress off --run-dir "$OUT_DIR/push"
echo "fetch_push: 3000 decisions in $((SECONDS - start)) s including start-up" | tee -a "$LOG"

# 4. batched envs, buffer and updates on the device: env steps per minute end to end
part "batched throughput" timeout 120 "$PY" benchmarks/batched_throughput.py --device cuda --n-envs 16384 \
    --steps 1000000 --warmup 200000 --batch-size 4096 --updates-per-step 0.001
grep -A4 "^| n_envs" "$LOG" | tail -n +3

# 5. the compiled update on CUDA: equal to the eager one, and how fast
part "compiled update test" timeout 150 "$PY" -m pytest -q -p no:warnings -p no:cacheprovider -o addopts="" \
    tests/algorithms/test_compiled_update.py -k "TQC-her"
part "compiled update speed, zoo size" timeout 120 "$PY" benchmarks/compiled_update.py --device cuda --algo tqc \
    --net 512 512 512 --batch 2048 --precision float32 bfloat16 --updates 100 --rounds 3
part "compiled update speed, [256, 256]" timeout 90 "$PY" benchmarks/compiled_update.py --device cuda --algo tqc \
    --net 256 256 --batch 256 --precision float32 --updates 200 --rounds 3
grep "^| float32\|^| bfloat16" "$LOG" | tail -n 3
exit $status
