# Sourced by the scripts that run on a lent GPU machine of this workplace's `device` tool (no hub, no
# package index, no fms-hf-tuning environment): installs the Python packages ftbench needs that the
# machine's image lacks (or has at other versions than CI tests), carried as wheels in $WHEELS (.whl/,
# see the device tool's README), and sets the offline environment. datasets is chosen by the image's
# pyarrow (5.x needs pyarrow >= 24; $WHEELS/alt/ holds a 4.x).
OUT="${OUT:?set OUT to a folder for the results}"
WHEELS="${WHEELS:-.whl}"
HOME_DIR="${FTBENCH_BENCH_HOME:-/tmp/ftbench-gpu}"
site=/tmp/ftbench-site
arrow_major="$(python3 -c 'import pyarrow; print(pyarrow.__version__.split(".")[0])' 2>/dev/null || echo 0)"
wheels=("$WHEELS"/*.whl)
if (( arrow_major < 24 )) && compgen -G "$WHEELS/alt/datasets-*.whl" >/dev/null; then
  mapfile -t wheels < <(ls "$WHEELS"/*.whl | grep -v /datasets-; ls "$WHEELS"/alt/datasets-*.whl)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}" || exit 1
export PYTHONPATH="$site:$PWD:$PWD/trainer-image:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
# engine fms-hf-tuning: a release's own stack (its transformers 4.x, trl, peft, datasets, fms-hf-tuning), carried
# as wheels in $WHEELS/fms/, goes to a folder of its own that a wrapper interpreter ($FMS_PYTHON) puts first on
# the path; run.py and `ftbench run` take it as --python, as they take an fms-hf-tuning environment's python.
# For 3.2.2 (2026-11-26, the machine's image supplying the rest): `pip download --no-deps --only-binary=:all:
# --python-version 3.12 ... -d .whl/fms fms-hf-tuning==3.2.2 transformers==4.55.4 tokenizers==0.21.4
# trl==0.19.1 peft==0.19.1 huggingface_hub==0.36.2 datasets==4.8.5 simpleeval==1.0.8 kernels==0.9.0`.
if compgen -G "$WHEELS/fms/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site-fms" "$WHEELS"/fms/*.whl || exit 1
  export FMS_PYTHON=/tmp/ftbench-fms-python
  printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec %s "$@"\n' "$site-fms" "$(command -v python3)" > "$FMS_PYTHON"
  chmod +x "$FMS_PYTHON"
fi
# The GPU's nvidia.com/gpu.product label, as GPU feature discovery writes it (spaces become dashes).
export GPU_MODEL="${GPU_MODEL:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-')}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
  python3 - <<'PY'
import importlib.metadata as md, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
for name in ("transformers", "trl", "peft", "accelerate", "datasets", "pyarrow", "pydantic", "nvidia-ml-py", "tokenizers"):
    print(name, md.version(name))
PY
  [[ -n "${FMS_PYTHON:-}" ]] && "$FMS_PYTHON" - <<'PY'
import importlib.metadata as md
print("fms-hf-tuning site:", *(f"{n} {md.version(n)}" for n in ("fms-hf-tuning", "transformers", "trl", "peft", "datasets")))
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
