#!/usr/bin/env bash
# One call on a lent single-GPU machine that compares the engines side by side: the matrix with engine
# fms-hf-tuning (the release whose wheels .whl/fms/ carries, in its own stack), then with engine trl, on the
# same random llama-7b weights (built once, by the first engine), while nvidia-smi logs the clocks and
# power every second. fms-hf-tuning goes first and is stopped after FMS_SECONDS; trl gets the rest of the
# call's BUDGET seconds.
# The machine's first training process pays for CUDA's start-up: compare steady tokens/s across engines.
# Each engine's outputs (env, log, results JSON, `ftbench results`, the results store) are packed into
# $OUT/<engine>.tgz: the device tool brings back at most 8 files.
# Usage (repo root): OUT=/some/dir [BUDGET=540] [FMS_SECONDS=300] [FMS_VERSION=3.2.2] [REPEATS=2] bash bench/gpu/engines-on-lent-gpu.sh
set -uo pipefail
budget="${BUDGET:-540}"
final="${OUT:?set OUT to a folder for the results}"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 1000 > "$final/clocks.csv" 2>&1 &
smi=$!
lease=(--max-steps 12 --warmup-steps 3 --dataset-entries 128)
run() {  # $1 engine, $2 seconds for its sweep, then run.py arguments
  local engine=$1 seconds=$2
  shift 2
  mkdir -p "/tmp/out-$engine" "/tmp/home-$engine"
  [[ -e /tmp/home-fms-hf-tuning/models && ! -e "/tmp/home-$engine/models" ]] && ln -s /tmp/home-fms-hf-tuning/models "/tmp/home-$engine/models"
  OUT="/tmp/out-$engine" FTBENCH_BENCH_HOME="/tmp/home-$engine" ENGINE="$engine" BENCH_TIMEOUT=$((seconds + 150)) \
    bash bench/gpu/on-lent-gpu.sh "${lease[@]}" --stop-after "$seconds" "$@"
  tar -C "/tmp/out-$engine" -czf "$final/$engine.tgz" .
}
run fms-hf-tuning "${FMS_SECONDS:-300}" --fms-version "${FMS_VERSION:-3.2.2}" --repeats "${REPEATS:-2}"
left=$((budget - SECONDS - 45))
(( left > 60 )) && run trl "$left" --repeats "${REPEATS:-2}"
kill "$smi"
ls -la "$final"
