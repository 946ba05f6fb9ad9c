#!/usr/bin/env bash
# Regenerate every generated file from its one source (the pydantic models and catalogs).
# Tests fail when any of these is stale: run this after changing ftbench/api, catalogs or results.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FTBENCH="${FTBENCH:-.venv/bin/ftbench}"
"$FTBENCH" crd -o crds
"$FTBENCH" crd -o helm/ftbench/crds
"$FTBENCH" docs -o docs
"${PYTHON:-.venv/bin/python}" hack/import_contract.py --write
"${PYTHON:-.venv/bin/python}" -m ftbench.api.chart_schema --write
"${PYTHON:-.venv/bin/python}" -m ftbench.generated.dashboard --write
"${PYTHON:-.venv/bin/python}" -m ftbench_trainer.measure.prompt_table --write
