#!/usr/bin/env bash
# Build the operator and trainer images from the unmodified Dockerfiles without a registry:
# local bases (Debian's Python 3.11; the machine's CPU torch wheel on it), then
# Dockerfile.operator, Dockerfile.trainer for trl, and for the fms-hf-tuning releases CI covers
# (the API's default and the newest; --all: every installable release). Idempotent: each image
# carries the content key of what it was built from (label io.ftbench.cache-key) and is skipped
# when current. Images live in buildah's vfs storage (/var/lib/containers as root).
#
# Usage: hack/build-images.sh [--all] [--release V]... [--only NAME]... [--list]
#   As root on Debian, installs buildah, mmdebstrap and uidmap when missing (CI machines).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "[build-images] installing buildah mmdebstrap uidmap"
    apt-get install -y -q buildah mmdebstrap uidmap >/dev/null \
      || { apt-get update -q >/dev/null && apt-get install -y -q buildah mmdebstrap uidmap >/dev/null; }
  else
    echo "[build-images] buildah and mmdebstrap are missing (apt-get install buildah mmdebstrap uidmap)" >&2
    exit 3
  fi
fi
exec "$PYTHON" -m ftbench.images "$@"
