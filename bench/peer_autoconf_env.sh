#!/usr/bin/env bash
# Build the peer's own environment for bench/peer_autoconf.py: a separate venv with ado-autoconf
# 2.1.2 (AutoGluon 1.6.3). It never touches /work/main/.venv or ftbench's dependencies.
#
#   bash bench/peer_autoconf_env.sh            # creates $PEER_VENV (default below)
#   PEER_VENV=/some/where bash bench/peer_autoconf_env.sh
#
# torch is installed first and pinned to the CPU wheel that lies on local disk (find-links);
# letting ado-autoconf pull plain `torch` would download a multi-GB CUDA build. If ado-autoconf's
# own dependencies (ado-core, ray) cannot be installed, the script falls back to the AutoGluon it
# pins, `autogluon.tabular[catboost,xgboost]==1.6.3`, which is all the bench's worker imports.
# Idempotent: it exits at once when the venv already imports autogluon.tabular.
set -euo pipefail

PEER_VENV="${PEER_VENV:-/root/.cache/ftbench/peer-autoconf}"
PY="$PEER_VENV/bin/python"

if [ -x "$PY" ] && "$PY" -c "import autogluon.tabular" >/dev/null 2>&1; then
    echo "peer venv ready: $PEER_VENV ($("$PY" -c 'import autogluon.tabular as t; print("autogluon.tabular", t.__version__)'))"
    exit 0
fi

[ -x "$PY" ] || python3 -m venv "$PEER_VENV"
"$PY" -m pip install --upgrade pip wheel >/dev/null
"$PY" -m pip install "torch==2.13.0"
if ! "$PY" -m pip install "torch==2.13.0" "ado-autoconf==2.1.2"; then
    echo "ado-autoconf==2.1.2 did not install; falling back to the AutoGluon it pins" >&2
    "$PY" -m pip install "torch==2.13.0" "autogluon.tabular[catboost,xgboost]==1.6.3"
fi
"$PY" -c "import autogluon.tabular as t; print('peer venv ready:', '$PEER_VENV', 'autogluon.tabular', t.__version__)"
