#!/usr/bin/env bash
# Create the Python environments used by the tests and the local runner:
#   .venv      main env in the repo root: operator + trainer (current trl / transformers 5) + dev tools
#   fms        one environment per offered fms-hf-tuning release, built by `ftbench engines build` from the
#              release's lock (ftbench/engines/data) and cached under ~/.cache/ftbench/engines (`ftbench run`
#              builds the one it needs on first use the same way)
# torch is pinned (hack/constraints.txt) in both so no install ever replaces it by a CUDA build.
# Idempotent: an env whose marker (.ftbench-ready: hash of pyproject's [project]/[build-system],
# hack/constraints.txt and this script) is current is skipped. An existing venv without a current
# marker (e.g. one another process just created) is installed into, not recreated.
# A fresh clone (no .venv) takes a copy of the last .venv built with the same marker, kept under
# ~/.cache/ftbench/venvs/<marker> for a week (hard links, then this clone's paths and editable
# installs): CI's fresh clones spent two minutes in pip on an unchanged environment.
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

STAMP="$(hash_inputs pyproject.toml devcluster/pyproject.toml hack/constraints.txt hack/setup-envs.sh)-py$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

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

VENV_CACHE="${FTBENCH_CACHE:-$HOME/.cache/ftbench}/venvs/$STAMP"
VENV_CACHE_DAYS=7

editable() {  # $1 = venv dir: ftbench and the test rig from this clone, the rest as installed
  "$1/bin/pip" install -q -c "$CONSTRAINTS" --no-deps -e '.' -e ./devcluster
}

# Both run as conditions (`if ... from_cache`, `to_cache || ...`), where bash ignores `set -e`: each step
# says what a failure does.
from_cache() {  # $1 = venv dir (absent): a hard-linked copy of the cached one, made this clone's
  [[ -f "$VENV_CACHE/.ftbench-ready" && -n "$(find "$VENV_CACHE" -maxdepth 0 -mtime -"$VENV_CACHE_DAYS")" ]] || return 1
  local t0; t0=$(now)
  rm -rf "$1.partial"
  cp -al "$VENV_CACHE" "$1.partial" || { rm -rf "$1.partial"; return 1; }
  # Scripts name their interpreter by absolute path; sed -i writes new files, so the cache keeps its own.
  { { grep -rlI --null "$VENV_CACHE" "$1.partial/bin" || true; } | xargs -0 -r sed -i "s|$VENV_CACHE|$ROOT/$1|g"; } \
    && mv "$1.partial" "$1" || { rm -rf "$1.partial"; return 1; }
  editable "$1" || { rm -rf "$1"; return 1; }
  log "$1 copied from $VENV_CACHE in $(elapsed "$t0")s"
}

to_cache() {  # $1 = venv dir, current: keep a hard-linked copy for the next fresh clone (best effort)
  [[ -d "$VENV_CACHE" ]] && return 0
  mkdir -p "$(dirname "$VENV_CACHE")" || return 1
  (
    flock 9 || exit 1  # one writer at a time (two clones setting up at once)
    [[ -d "$VENV_CACHE" ]] && exit 0
    rm -rf "$VENV_CACHE.partial"
    cp -al "$1" "$VENV_CACHE.partial" \
      && { { grep -rlI --null "$ROOT/$1" "$VENV_CACHE.partial/bin" || true; } | xargs -0 -r sed -i "s|$ROOT/$1|$VENV_CACHE|g"; } \
      && mv "$VENV_CACHE.partial" "$VENV_CACHE" || { rm -rf "$VENV_CACHE.partial"; exit 1; }
  ) 9>"$VENV_CACHE.lock" || return 1
  find "$(dirname "$VENV_CACHE")" -mindepth 1 -maxdepth 1 -type d -mtime +"$VENV_CACHE_DAYS" -exec rm -rf {} +
}

setup_main() {
  local v=.venv t0 t
  if is_current "$v"; then to_cache "$v" || log "could not keep a copy of $v in $VENV_CACHE"; log "$v is current, skipped"; return; fi
  if [[ ! -e "$v" && -z "${FTBENCH_FORCE:-}" ]] && from_cache "$v"; then return; fi
  t0=$(now); log "creating/updating $v"
  make_venv "$v"
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" torch==2.13.0; log "  torch: $(elapsed "$t")s"
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" -e '.[operator,trainer,report,dev]'
  log "  ftbench[operator,trainer,report,dev]: $(elapsed "$t")s"
  # The test rig (tests, benchmarks, `ftbench dev`): its own distribution, not in the ftbench wheel.
  t=$(now); "$v/bin/pip" install -q -c "$CONSTRAINTS" --no-deps -e ./devcluster; log "  ftbench-devcluster: $(elapsed "$t")s"
  check_torch "$v"
  "$v/bin/python" -c "import transformers, trl, peft, accelerate, datasets; print('[setup-envs]   transformers', transformers.__version__, 'trl', trl.__version__)"
  echo "$STAMP" > "$v/.ftbench-ready"
  to_cache "$v" || log "could not keep a copy of $v in $VENV_CACHE"
  log "$v ready in $(elapsed "$t0")s"
}

setup_fms() {  # every offered release: ftbench's environment builder, cached by content in ~/.cache/ftbench/engines
  local t0; t0=$(now)
  log "fms-hf-tuning environments (one per release, from ftbench/engines/data)"
  .venv/bin/ftbench engines build
  log "fms-hf-tuning environments ready in $(elapsed "$t0")s"
}

T0=$(now)
case "$WHICH" in
  main) setup_main ;;
  fms) setup_main; setup_fms ;;
  all) setup_main; setup_fms ;;
  *) echo "usage: $0 [main|fms|all]" >&2; exit 2 ;;
esac
log "done in $(elapsed "$T0")s"
