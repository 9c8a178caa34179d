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
#   5. the compiled update on CUDA (compile=True: the whole step, loss, gradients and Adam, in CUDA graphs): its tests
#      against the eager update (TQC, DQN and TD3 with HER, SAC on images; saved, loaded and trained on); then its time
#      per update against the eager one's at the zoo's size ([512]*3, batch 2048; benchmarks/compiled_update.py), and
#      env steps/s while learning with the zoo's recipe on FetchPush with 8 envs in their own processes, eager,
#      compiled, and compiled in mixed bfloat16 precision taking turns (benchmarks/fetch_tqc.py; one env:
#      gpu_zoo_speed.sh).
#
# The checks of correctness (1, 2 and 5's test) run at once; the timed parts then run one at a time, alone.
#
# Usage, from the repository root: bash benchmarks/gpu_check.sh [--quick] [OUT_DIR]   (default $OUT, else
# /tmp/gpu_check). --quick runs the checks of correctness only (1, 2 and 5's test; about 2.5 minutes), for a session
# that spends its GPU time on other measurements; say so where the result is recorded.
# It prints one PASS/FAIL line per part and writes the log to OUT_DIR/gpu_check.log; record the result with the
# date in docs/benchmarks.md ("GPU check").
#
# A machine whose Python lacks gymnasium, gymnasium-robotics or mujoco takes them as wheels from .whl/
# (benchmarks/gpu_env.sh says how to make them).
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
OUT_DIR=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
source benchmarks/gpu_env.sh
failed="$OUT_DIR/failed"
rm -f "$failed"
part() {  # part NAME COMMAND...: run it, log it (as one block), print PASS or FAIL with its time
    local name=$1 start=$SECONDS rc tmp
    shift
    tmp=$(mktemp)
    "$@" >"$tmp" 2>&1
    rc=$?
    { echo "== $name: $*"; cat "$tmp"; } >>"$LOG"
    rm -f "$tmp"
    [ $rc -eq 0 ] || echo "$name" >>"$failed"
    printf '%s %s (%ds)\n' "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$name" $((SECONDS - start)) | tee -a "$LOG"
}

: >"$LOG"
"$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee -a "$LOG"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'" || exit 2
XDIST=() XDIST_COMPILED=()
# 16 cores: the CUDA tests took 180 s on 12 workers, 270 s (cut off) on 6 beside the other checks (2026-11-28)
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 11) XDIST_COMPILED=(-n 4)
PYTEST=("$PY" -m pytest -q -p no:warnings -p no:cacheprovider -o addopts="")

# correctness, at once
# 1. every test that needs CUDA (they skip elsewhere), and the round-trip matrix's CUDA half
part "cuda tests" timeout 300 "${PYTEST[@]}" "${XDIST[@]}" \
    tests/io/test_round_trip_matrix.py tests/buffers/test_storage_device.py tests/buffers/test_her_sampling.py \
    tests/nn/test_precision.py tests/batched -k "cuda or CUDA" &
# 2. a CUDA run killed after a checkpoint and resumed, against the same run never interrupted
part "cli resume on cuda" timeout 200 "$PY" benchmarks/gpu_resume_check.py "$OUT_DIR/resume" &
# 5a. the compiled step (CUDA graphs) equals the eager one on CUDA: goal envs with HER, images, a loaded model
part "compiled update test" timeout 240 "${PYTEST[@]}" "${XDIST_COMPILED[@]}" tests/algorithms/test_compiled_update.py \
    -k "TQC-her or DQN-her or TD3-her or SAC-images or whole_step_is_one_function or trains_on_as_never" &
wait
if [ $QUICK = 1 ]; then
    echo "total $SECONDS s (--quick: the timings left out)" | tee -a "$LOG"
    [ ! -s "$failed" ]
    exit
fi

# timings, one at a time
# 5b. time per update at the zoo's size, eager against compiled (compile time reported)
part "compiled update speed, zoo size" timeout 120 "$PY" benchmarks/compiled_update.py --device cuda --algo tqc \
    --net 512 512 512 --batch 2048 --precision float32 --updates 100 --rounds 3
grep "^| float32" "$LOG" | tail -n 1
# 5c. the zoo's recipe on FetchPush-v4 with 8 envs, taking turns (compile time paid in the warm-up, untimed)
part "zoo recipe, 8 envs" timeout 200 "$PY" benchmarks/fetch_tqc.py speed --device cuda --net-arch 512 512 512 \
    --batch-size 2048 --steps 800 --warmup 80 --repeats 1 --n-envs 8 \
    --variants herl-float32 herl-float32-compiled herl-bfloat16-compiled
grep "^median" "$LOG"
# 4. batched envs, buffer and updates on the device: env steps per minute end to end
part "batched throughput" timeout 100 "$PY" benchmarks/batched_throughput.py --device cuda --n-envs 16384 \
    --steps 1000000 --warmup 200000 --batch-size 4096 --updates-per-step 0.001
grep -A4 "^| n_envs" "$LOG" | tail -n +3
# 3. the fetch_push preset's first 3,000 decisions on CUDA (its update compiled: CUDA graphs, ~30 s to compile)
start=$SECONDS
part "fetch_push 3000 decisions" timeout 150 "$PY" -m herl train --env FetchPush-v4 --device cuda --timesteps 3000 \
    --set eval.freq=100000 --set checkpoint.freq=100000 --progress off --run-dir "$OUT_DIR/push"
echo "fetch_push: 3000 decisions in $((SECONDS - start)) s including start-up" | tee -a "$LOG"
echo "total $SECONDS s" | tee -a "$LOG"
[ ! -s "$failed" ]
