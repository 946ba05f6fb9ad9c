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

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  if [[ "$(id -u)" == 0 ]] || [[ -x "${FTBENCH_CACHE:-$HOME/.cache/ftbench}/k8s-1.20.2/bin/kube-apiserver" ]]; then
    bash hack/build-control-plane.sh >/dev/null
  else
    echo "[test] not root and no cached control plane: k8s tests will be skipped (set KUBEBUILDER_ASSETS)" >&2
  fi
fi
bash hack/setup-envs.sh all

# The HTML report is checked in a real browser (tests marked `browser`): Debian's chromium.
if ! command -v chromium >/dev/null && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
  echo "[test] installing chromium (apt-get)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# The images (operator, trl and CI's fms-hf-tuning trainers; ~10 min on a fresh machine, seconds
# when current), as the control plane above: as root (the script installs buildah) or where buildah
# is. Built here so the log shows it; the image and e2e tests then find them current. Otherwise
# the image tests skip and the e2e tests run the pods as host processes.
if [[ "$(id -u)" == 0 ]] || command -v buildah >/dev/null; then
  echo "[test] images"
  PYTHON=.venv/bin/python bash hack/build-images.sh
fi

echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "[test] mypy"
.venv/bin/mypy

# One pytest worker per core (FTBENCH_TEST_WORKERS overrides; 0 runs in this process), each taking whole
# files (--dist loadfile: a file's module fixtures, such as one control plane's operator or a training
# matrix, stay on one worker). Tests hold no wall-clock assertions, and each worker has its own control
# plane, FTBENCH_HOME and ports; the shared caches (engine environments, images, the ado peer) are built
# above or under a lock.
WORKERS="${FTBENCH_TEST_WORKERS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}"  # nproc honours OMP_NUM_THREADS (1 above)
echo "[test] pytest (${WORKERS} workers)"
exec .venv/bin/python -m pytest -p no:cacheprovider -n "$WORKERS" --dist loadfile "$@"
