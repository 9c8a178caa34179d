#!/bin/bash
# Torch threads of runs sharing the 2 cores: wall time of 2,500 decisions (1,500 updates after learning_starts)
# of the fetch_push preset, per run, in several arrangements (docs/cli.md, "Threads"). Usage: bash
# benchmarks/threads.sh [OUTDIR] (default /tmp/tb; about 14 minutes on 2 cores; run it on an otherwise idle machine).
set -e
out=${1:-/tmp/tb}; rm -rf $out; mkdir -p $out
common="--env FetchPush-v4 --timesteps 2500 --set eval.freq=0 --set checkpoint.freq=2500 --progress off"
herl train $common --seed 0 --threads 2 --run-dir $out/alone_t2 > $out/alone_t2.log 2>&1
herl train $common --seed 0 --threads 1 --run-dir $out/alone_t1 > $out/alone_t1.log 2>&1
herl train $common --seed 0 1 --jobs 2 --threads 1 --run-dir $out/j2_t1 > $out/j2_t1.log 2>&1
herl train $common --seed 0 1 --jobs 2 --threads 2 --run-dir $out/j2_t2 > $out/j2_t2.log 2>&1
herl train $common --seed 0 1 --jobs 2 --run-dir $out/j2_preset > $out/j2_preset.log 2>&1
OMP_WAIT_POLICY=PASSIVE herl train $common --seed 0 --threads 2 --run-dir $out/alone_t2_passive > $out/alone_t2_passive.log 2>&1
OMP_WAIT_POLICY=PASSIVE herl train $common --seed 0 1 --jobs 2 --threads 2 --run-dir $out/j2_t2_passive > $out/j2_t2_passive.log 2>&1
for d in alone_t2 alone_t1 j2_t1 j2_t2 j2_preset alone_t2_passive j2_t2_passive; do
  for s in $out/$d/seed_*; do
    python -c "import json; s=json.load(open('$s/summary.json')); c=json.load(open('$s/config.json')); print('$d', '$(basename $s)', 'threads', c['threads'], round(s['wall_time'],1), 's', round(2500/s['wall_time'],1), 'decisions/s')"
  done
done
