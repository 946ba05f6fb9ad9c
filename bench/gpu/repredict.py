"""Today's memory prediction against the GPU runs kept in bench/results: each run that succeeded, planned from its
stored spec and predicted at the batch shape it measured, beside the CUDA allocator's peak it measured and the
prediction stored with it (made by the code of its day).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/gpu/repredict.py bench/results/gpu-h200-2026-11-26/results.db

The predictor runs in this process, so with this environment's stack: only runs of the engine given (default
trl, this environment's) are predicted; another engine's runs need its environment's python. A run is planned
from its spec as it ran, without today's validation (the one-GPU points with distributedBackend FSDP ran before
validation refused them, as FSDP2 over one rank, and are predicted so). Runs that repeat a point predict alike:
one row per point. Nothing is asserted: it prints a table.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import ExperimentRef, LaunchPlan
from ftbench.render.plan import build_plan

# What the stored specs name that the plan needs; their weights were random (run.py --random-weights), so the
# catalog's architecture is the model.
FIELDS = ("experiment", "engine", "model", "modelMaxLength", "numberGpus", "batchSize", "gpuModel", "datasetId",
          "gradientCheckpointing", "attentionImplementation", "distributedBackend", "bf16", "torchDtype",
          "gradientAccumulationSteps", "fsdpShardingStrategy")  # fmt: skip


def plan_of(spec: dict[str, Any], work: Path) -> LaunchPlan:
    fields = {k: spec[k] for k in FIELDS if k in spec}
    profile = ClusterProfile.model_validate({"storage": {"dataDir": str(work), "modelRoot": str(work / "models")}})
    plan = build_plan(
        FineTuneExperimentSpec.model_validate(fields),
        load_catalog(),
        profile,
        ref=ExperimentRef(name="repredict"),
        runtime=Runtime.JOB,
    )
    return plan.model_copy(update={"model": plan.model.model_copy(update={"ref": str(work / "absent")})})


def rows(store: Path, engine: str) -> list[dict[str, Any]]:
    from ftbench_trainer.predict.model import predict

    out = []
    seen: set[str] = set()
    query = "select name, spec_json, results_json from runs where status = 'Succeeded' and engine = ? order by name"
    for name, spec_json, results_json in sqlite3.connect(store).execute(query, (engine,)):
        spec, metrics = json.loads(spec_json), json.loads(results_json)[0]["metrics"]
        point = json.dumps({k: spec.get(k) for k in FIELDS}, sort_keys=True)
        if point in seen:
            continue
        seen.add(point)
        with tempfile.TemporaryDirectory() as work:
            shape = metrics["peakBatchShape"]
            today = predict(plan_of(spec, Path(work)), batch=(shape[0], shape[1]), count_rows=False).peak_bytes
        measured = metrics["gpuMaxMemoryAllocatedBytes"]
        out.append({"run": name, "experiment": spec["experiment"], "batch": f"{shape[0]} x {shape[1]}",
                    "stored": metrics.get("predictedPeakBytes"), "today": today, "measured": measured})  # fmt: skip
    return out


def error(predicted: int | None, measured: int) -> str:
    return "" if predicted is None else f"{100 * (predicted - measured) / measured:+.2f}"


def table(store: Path, found: list[dict[str, Any]]) -> str:
    lines = [
        f"{store}:",
        "",
        "| run | experiment | batch | measured GB | stored prediction GB | error % | today's GB | error % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        stored = "" if r["stored"] is None else f"{r['stored'] / 1e9:.2f}"
        lines.append(
            f"| {r['run']} | {r['experiment']} | {r['batch']} | {r['measured'] / 1e9:.2f} | {stored} | "
            f"{error(r['stored'], r['measured'])} | {r['today'] / 1e9:.2f} | {error(r['today'], r['measured'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="+", type=Path, help="results.db files of bench/gpu/run.py")
    parser.add_argument("--engine", default="trl", help="the runs' engine to predict (this environment's stack)")
    args = parser.parse_args(argv)
    for store in args.stores:
        print(table(store, rows(store, args.engine)), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
