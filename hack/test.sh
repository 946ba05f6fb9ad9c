#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script; the README shows it).
# Idempotent set-up first: the control plane binaries (cached under ~/.cache/ftbench) and the two
# Python environments (.venv and one per fms-hf-tuning release). Extra arguments go to pytest, e.g. `-m "not k8s"`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Offline and single-threaded: nothing may be downloaded at run time, and small CPU runs vary
# 10x with the default thread count (see docs/measurements.md).
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

# Set-up, side by side where it can be (a fresh CI machine spends ~20 minutes here, one after another):
# the Debian packages first in one apt phase (apt takes one lock), then the control plane's Go build in the
# background (both cores, ~7 minutes) while the Python environments and the images build (mostly pip
# downloads and vfs copies). Each step is idempotent and cached by content, so a second run takes seconds.
root=0; [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null && root=1
if (( root )); then
  need=()
  command -v chromium >/dev/null || need+=(chromium)   # the HTML report's `browser` tests
  { command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; } || need+=(buildah mmdebstrap uidmap)
  # Prometheus for the dashboard's queries (tests/operator/test_prometheus.py), without the node exporter
  # it recommends.
  lean=(); command -v prometheus >/dev/null || lean+=(prometheus)
  if (( ${#need[@]} + ${#lean[@]} )); then
    echo "[test] apt-get install ${need[*]} ${lean[*]}"
    apt-get update -qq
    if (( ${#need[@]} )); then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
    if (( ${#lean[@]} )); then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
    fi
  fi
fi

pids=()
CP_LOG="${FTBENCH_CACHE:-$HOME/.cache/ftbench}/logs/control-plane.log"
if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  if (( root )) || [[ -x "${FTBENCH_CACHE:-$HOME/.cache/ftbench}/k8s-1.20.2/bin/kube-apiserver" ]]; then
    mkdir -p "$(dirname "$CP_LOG")"
    echo "[test] control plane (background; log $CP_LOG)"
    bash hack/build-control-plane.sh >"$CP_LOG" 2>&1 & pids+=($!)
  else
    echo "[test] not root and no cached control plane: k8s tests will be skipped (set KUBEBUILDER_ASSETS)" >&2
  fi
fi
bash hack/setup-envs.sh main
bash hack/setup-envs.sh fms & pids+=($!)
# The images (operator, trl and CI's fms-hf-tuning trainers), as the control plane above: as root (the
# script installs buildah) or where buildah is. They build in the background while the tests that do not
# need them run (minutes of pip and vfs copies each time the sources change); the image and e2e tests come
# last in the run (tests/conftest.py) and their fixtures wait on the build's lock, then find them current.
# Otherwise the image tests skip and the e2e tests run the pods as host processes.
IMAGES_LOG="${FTBENCH_CACHE:-$HOME/.cache/ftbench}/logs/images.log"
images_pid=""
if (( root )) || command -v buildah >/dev/null; then
  mkdir -p "$(dirname "$IMAGES_LOG")"
  echo "[test] images (background; log $IMAGES_LOG)"
  PYTHON=.venv/bin/python bash hack/build-images.sh >"$IMAGES_LOG" 2>&1 & images_pid=$!
fi
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "[test] a set-up step failed (exit $?)" >&2; tail -40 "$CP_LOG" 2>/dev/null; exit 1; }
done
if [[ -f "$CP_LOG" ]]; then tail -3 "$CP_LOG"; fi

echo "[test] commit subjects (hack/check_commits.py)"
.venv/bin/python hack/check_commits.py

echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

# mypy's cache beside the other caches: a fresh clone checks in seconds what changed, not 250 files cold.
echo "[test] mypy"
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${FTBENCH_CACHE:-$HOME/.cache/ftbench}/mypy}" .venv/bin/mypy

# One pytest worker per core (FTBENCH_TEST_WORKERS overrides; 0 runs in this process), each taking whole
# files (--dist loadfile: a file's module fixtures, such as one control plane's operator or a training
# matrix, stay on one worker). Tests hold no wall-clock assertions, and each worker has its own control
# plane, FTBENCH_HOME and ports; the shared caches (engine environments, images, the ado peer) are built
# above or under a lock.
WORKERS="${FTBENCH_TEST_WORKERS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}"  # nproc honours OMP_NUM_THREADS (1 above)
echo "[test] pytest (${WORKERS} workers)"
status=0
.venv/bin/python -m pytest -p no:cacheprovider -n "$WORKERS" --dist loadfile "$@" || status=$?
if [[ -n "$images_pid" ]]; then
  if wait "$images_pid"; then tail -6 "$IMAGES_LOG"; else
    echo "[test] the image build failed (exit $?); its log's tail:" >&2; tail -40 "$IMAGES_LOG" >&2; (( status )) || status=1
  fi
fi
exit "$status"
