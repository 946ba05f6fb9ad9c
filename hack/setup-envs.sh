#!/usr/bin/env bash
# Create the two Python environments used by the tests and the local runner, in the repo root:
#   .venv      main env: operator + trainer (current trl / transformers 5) + dev tools
#   .venv-fms  fms-hf-tuning 3.2.2 env (transformers 4.55, trl 0.19), with our ftbench_trainer package
# torch is pinned (hack/constraints.txt) in both so no install ever replaces it by a CUDA build.
# Idempotent: an env whose marker (.ftbench-ready: hash of pyproject's [project]/[build-system],
# hack/constraints.txt and this script) is current is skipped. An existing venv without a current
# marker (e.g. one another process just created) is installed into, not recreated.
#
# Usage: hack/setup-envs.sh [main|fms|all]   (default: all)
#   PYTHON=python3.11 to choose the interpreter; FTBENCH_FORCE=1 to ignore the markers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
CONSTRAINTS="$ROOT/hack/constraints.txt"
WHICH="${1:-all}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# fms-hf-tuning 3.2.2 runtime deps (installed explicitly: its own pins exclude torch 2.13).
FMS_VERSION="3.2.2"
FMS_DEPS=(
  "numpy>=1.26.4,<2.2" "accelerate>=1.9,<2" "transformers>=4.55,<=4.55.4" "tokenizers<=0.22"
  "trl>=0.19.1,<0.20" "peft>=0.19.1,<0.20" "datasets>=4,<5" "sentencepiece<0.3" "simpleeval<2"
  "pillow>=12.3" "kernels<=0.9.0"
)
# What ftbench_trainer needs beyond that (it is installed with --no-deps in .venv-fms).
FMS_EXTRA=("pydantic>=2.6,<3" "pyyaml>=6" "psutil>=5.9" "nvidia-ml-py>=12" "pyarrow")

hash_inputs() {  # of pyproject's install-relevant tables (not tool config) + the other files
  "$PYTHON" - "$@" <<'PY'
import hashlib, json, sys, tomllib
h = hashlib.sha256()
for p in sys.argv[1:]:
    h.update(p.encode() + b"\0")
    with open(p, "rb") as f:
        data = f.read()
    if p.endswith("pyproject.toml"):
        doc = tomllib.loads(data.decode())
        data = json.dumps({k: doc.get(k) for k in ("build-system", "project")}, sort_keys=True).encode()
    h.update(data)
print(h.hexdigest())
PY
}

STAMP="$(hash_inputs pyproject.toml hack/constraints.txt hack/setup-envs.sh)-py$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

now() { date +%s.%N; }
elapsed() { "$PYTHON" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
log() { echo "[setup-envs] $*"; }

is_current() {  # $1 = venv dir
  [[ -z "${FTBENCH_FORCE:-}" && -x "$1/bin/python" && -f "$1/.ftbench-ready" ]] \
    && [[ "$(cat "$1/.ftbench-ready")" == "$STAMP" ]]
}

make_venv() {  # $1 = venv dir; reuse an existing one (another process may have created it)
  if [[ ! -x "$1/bin/python" ]]; then
    "$PYTHON" -m venv "$1"
  fi
  "$1/bin/python" -m pip install -q --upgrade pip
}

check_torch() {  # $1 = venv dir
  "$1/bin/python" - <<'PY'
import torch
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
print(f"[setup-envs]   torch {torch.__version__}, cuda={torch.version.cuda}")
PY
}

setup_main() {
  local v=.venv t0 t
  if is_current "$v"; then log "$v is current, skipped"; return; fi
  t0=$(now); log "creating/updating $v"
  make_venv "$v"
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" torch==2.13.0; log "  torch: $(elapsed "$t")s"
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" -e '.[operator,trainer,dev]'
  log "  ftbench[operator,trainer,dev]: $(elapsed "$t")s"
  check_torch "$v"
  "$v/bin/python" -c "import transformers, trl, peft, accelerate, datasets; print('[setup-envs]   transformers', transformers.__version__, 'trl', trl.__version__)"
  echo "$STAMP" > "$v/.ftbench-ready"
  log "$v ready in $(elapsed "$t0")s"
}

setup_fms() {
  local v=.venv-fms t0 t
  if is_current "$v"; then log "$v is current, skipped"; return; fi
  t0=$(now); log "creating/updating $v"
  make_venv "$v"
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" torch==2.13.0; log "  torch: $(elapsed "$t")s"
  t=$(now)
  "$v/bin/pip" install -q --no-deps "fms-hf-tuning==$FMS_VERSION"
  "$v/bin/pip" install -q -c "$CONSTRAINTS" "${FMS_DEPS[@]}"
  log "  fms-hf-tuning $FMS_VERSION + deps: $(elapsed "$t")s"
  t=$(now)
  "$v/bin/pip" install -q --no-deps -e .
  "$v/bin/pip" install -q -c "$CONSTRAINTS" "${FMS_EXTRA[@]}"
  log "  ftbench (no deps) + extras: $(elapsed "$t")s"
  check_torch "$v"
  "$v/bin/python" -c "import tuning.sft_trainer, transformers, ftbench_trainer; print('[setup-envs]   fms OK, transformers', transformers.__version__)"
  echo "$STAMP" > "$v/.ftbench-ready"
  log "$v ready in $(elapsed "$t0")s"
}

T0=$(now)
case "$WHICH" in
  main) setup_main ;;
  fms) setup_fms ;;
  all) setup_main; setup_fms ;;
  *) echo "usage: $0 [main|fms|all]" >&2; exit 2 ;;
esac
log "done in $(elapsed "$T0")s"
