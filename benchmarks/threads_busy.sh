#!/bin/bash
# Torch threads on a busy machine: wall time of 1,600 decisions (600 updates after learning_starts) of the fetch_push
# preset, idle and beside other work (one Python process spinning on one core, as a laptop always has something
# running), with the threads herl chooses and with the preset's two forced (docs/cli.md, "Threads").
# Usage: bash benchmarks/threads_busy.sh [OUTDIR] (default /tmp/tbusy; a few minutes on 2 cores, otherwise idle).
set -e
out=${1:-/tmp/tbusy}; rm -rf $out; mkdir -p $out
common="--env FetchPush-v4 --timesteps 1600 --seed 0 --set eval.freq=0 --set checkpoint.freq=1600 --progress off"
herl train $common --run-dir $out/idle_auto > $out/idle_auto.log 2>&1
python -c "while True: pass" & spinner=$!
trap "kill $spinner 2>/dev/null" EXIT
sleep 2
herl train $common --run-dir $out/busy_auto > $out/busy_auto.log 2>&1
herl train $common --threads 2 --run-dir $out/busy_t2 > $out/busy_t2.log 2>&1
kill $spinner
for d in idle_auto busy_auto busy_t2; do
  python -c "import json; s=json.load(open('$out/$d/seed_0/summary.json')); c=json.load(open('$out/$d/seed_0/config.json')); print('$d', 'threads', c['threads'], round(s['wall_time'],1), 's', round(1600/s['wall_time'],1), 'decisions/s')"
done
grep -h "torch thread" $out/*.log || true
