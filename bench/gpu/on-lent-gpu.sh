#!/usr/bin/env bash
# The GPU matrix on a lent single-GPU machine of this workplace's `device` tool: no hub, no model
# volume, no fms-hf-tuning environment, no package index. The figures of docs/benchmarks.md's GPU
# matrix were made with it:
#   - lent-env.sh installs the packages the machine's image lacks, carried as wheels in .whl/;
#   - bench/gpu/run.py runs the matrix on this GPU with engine $ENGINE (default trl; fms-hf-tuning runs
#     in $FMS_PYTHON), the catalog's llama-7b architecture with random weights (--random-weights),
#     sdpa attention (the image has no flash-attn), fewer steps and repeats to fit the lease;
#   - what comes back lands in $OUT: the environment, the log, the results JSON, the docs page with
#     the new table, `ftbench results` and the results store.
# Usage (repo root): OUT=/some/dir [ENGINE=fms-hf-tuning] bash bench/gpu/on-lent-gpu.sh [extra run.py arguments]
set -uo pipefail
source "$(dirname "$0")/lent-env.sh"
ENGINE="${ENGINE:-trl}"
python=()
[[ "$ENGINE" == fms-hf-tuning ]] && python=(--python "${FMS_PYTHON:?engine fms-hf-tuning needs its wheels in .whl/fms/}")
timeout "${BENCH_TIMEOUT:-480}" python3 bench/gpu/run.py --gpus 1 --engine "$ENGINE" "${python[@]}" --gpu-model "$GPU_MODEL" --attention sdpa --random-weights \
  --home "$HOME_DIR" --out "$OUT/gpu-results.json" --write-docs docs/benchmarks.md "$@" 2>&1 | tee "$OUT/run.log"
echo "run.py exit: ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
cp docs/benchmarks.md "$OUT/benchmarks.md"
FTBENCH_HOME="$HOME_DIR" python3 -m ftbench results > "$OUT/results.txt" 2>&1
FTBENCH_HOME="$HOME_DIR" python3 -m ftbench results --export json -o "$OUT/runs.json" >> "$OUT/results.txt" 2>&1
tar -C "$HOME_DIR" --exclude=models --exclude=data -czf "$OUT/home.tgz" . 2>/dev/null
ls -la "$OUT"
