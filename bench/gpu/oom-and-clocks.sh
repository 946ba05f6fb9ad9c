#!/usr/bin/env bash
# The second call on a lent single-GPU machine (after on-lent-gpu.sh), for what the matrix's lease
# left open, on the same llama-7b random-weight folder:
#   - full fine-tuning with a window long enough for a clean measurement (27 measured steps), while
#     nvidia-smi logs the SM clock, the power and the clock-event reasons every 0.5 s (clocks.csv),
#     to see which reason raised the trainer's gpuThrottled flag;
#   - the matrix's deliberate OOM point (batch 128 x 4096 tokens, full fine-tuning on one GPU), which
#     must end GpuOom with the reason.
# Usage (repo root): OUT=/some/dir bash bench/gpu/oom-and-clocks.sh
set -uo pipefail
source "$(dirname "$0")/lent-env.sh"
weights="$HOME_DIR/models/$(python3 -c 'from ftbench.catalog import load_catalog; print(load_catalog().models["llama-7b"].weights.vanilla)')"
python3 -m ftbench_trainer.random_weights "$weights" --architecture \
  "$(python3 -c 'import json; from ftbench.catalog import load_catalog; print(json.dumps(load_catalog().models["llama-7b"].architecture))')"
reasons=clocks_event_reasons
nvidia-smi --query-gpu=clocks_event_reasons.active --format=csv >/dev/null 2>&1 || reasons=clocks_throttle_reasons
nvidia-smi --query-gpu="timestamp,clocks.sm,power.draw,temperature.gpu,$reasons.active,$reasons.sw_power_cap,$reasons.hw_slowdown,$reasons.sw_thermal_slowdown,$reasons.hw_thermal_slowdown,$reasons.hw_power_brake_slowdown" \
  --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
smi=$!
spec() {  # $1 name, $2 batchSize, $3 modelMaxLength, $4 maxSteps
  cat <<YAML
apiVersion: ftbench.io/v1alpha1
kind: FineTuneExperiment
metadata: {name: $1}
spec:
  engine: trl
  model: llama-7b
  experiment: finetune_full_benchmark-v1.0.0
  datasetId: news-tokens-16384plus-entries-4096
  modelMaxLength: $3
  batchSize: $2
  numberGpus: 1
  gpuModel: NVIDIA-H200
  attentionImplementation: sdpa
  maxSteps: $4
  warmupSteps: 3
YAML
}
spec full-30-steps 8 2048 30 > /tmp/full.yaml
spec oom-128x4096 128 4096 12 > /tmp/oom.yaml
for name in full oom; do
  FTBENCH_HOME="$HOME_DIR" timeout "${RUN_TIMEOUT:-150}" python3 -m ftbench run /tmp/$name.yaml --dataset-entries 256 -o json \
    > "$OUT/$name.json" 2>> "$OUT/run.log"
  echo "ftbench run $name exit: $?" | tee -a "$OUT/run.log"
done
kill $smi
FTBENCH_HOME="$HOME_DIR" python3 -m ftbench results > "$OUT/results.txt" 2>&1
tar -C "$HOME_DIR" --exclude=models --exclude=data -czf "$OUT/home.tgz" . 2>/dev/null
ls -la "$OUT"
