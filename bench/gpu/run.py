"""The GPU benchmark matrix in one command: run bench/gpu/matrix.yaml, write the figures and the table.

On a GPU node (drivers, fms-hf-tuning environments and the llama-7b weights under the profile's
model root)::

    python bench/gpu/run.py --gpus 8 --out gpu-results.json --write-docs docs/benchmarks.md

runs every point of the matrix with `ftbench sweep` (fresh trainer processes, 3 repeats each, the
operator's order), then writes a JSON file of every point's figures and the "GPU matrix" table of
docs/benchmarks.md between its markers: throughput with its 95 % interval across repeats, MFU against
the device's peak, peak memory, the noise flags, and the deliberate OOM point's outcome.

No GPU is lent to this project's machines or CI, so `--dry-run` runs the same file on CPU ranks with
the tiny model (trl, float32, 8 steps, one repeat, 2 ranks for N) and writes the same outputs: CI runs
it (tests/local/test_gpu_bench.py) so the command is known to work the day it meets a GPU. Points a
CPU cannot run (GPTQ kernels) stay in the table as Invalid with the validator's reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ftbench.catalog import load_catalog
from ftbench.contracts import env as E
from ftbench.contracts.results import NoiseFlag, TrainerResult
from ftbench.local.store import ResultsStore
from ftbench.report.data import SweepData, from_store
from ftbench.stats.noise import describe

MATRIX = Path(__file__).with_name("matrix.yaml")
START, END = "<!-- gpu-matrix:start -->", "<!-- gpu-matrix:end -->"
OOM_NOTE = "the deliberate OOM point"
# The CPU stand-in of the template in --dry-run: same experiments, backends and repeats machinery.
DRY_TEMPLATE: dict[str, Any] = {
    "engine": "trl",
    "model": "ftbench-tiny-llama",
    "datasetId": "news-chars-512-entries-4096",
    "modelMaxLength": 256,
    "batchSize": 4,
    "torchDtype": "float32",
    "gradientCheckpointing": False,
    "maxSteps": 8,
    "warmupSteps": 2,
    "device": "cpu",
}
DRY_RANKS = 2


def matrix_document(gpus: int, dry_run: bool, path: Path = MATRIX) -> dict[str, Any]:
    """The sweep to run: the matrix with N = `gpus`, or its CPU stand-in."""
    doc = yaml.safe_load(path.read_text())
    spec = doc["spec"]
    n = DRY_RANKS if dry_run else gpus
    spec["matrix"]["numberGpus"] = sorted({1, n})
    if not dry_run:
        return doc
    spec["template"] = {k: v for k, v in spec["template"].items() if k != "gpuModel"} | DRY_TEMPLATE
    for entry in spec.get("include") or []:  # the OOM point runs as an ordinary point on CPU, still its own
        entry.pop("modelMaxLength", None)
        entry["batchSize"] = 2 * DRY_TEMPLATE["batchSize"]
    spec["repeats"] = 1
    return doc


def run_sweep(doc: dict[str, Any], home: Path, *, dry_run: bool, python: str | None) -> None:
    """`ftbench sweep` in its own process with FTBENCH_HOME = `home`."""
    path = home / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    command = [sys.executable, "-m", "ftbench", "sweep", str(path), "-o", "json"]
    command += ["--dataset-entries", "64"] if dry_run else []
    command += ["--python", python] if python else []
    done = subprocess.run(command, env={**os.environ, E.FTBENCH_HOME: str(home)}, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: some point failed, which the table shows
        raise SystemExit(f"ftbench sweep exited {done.returncode}:\n{done.stderr[-3000:]}")


def point_rows(sweep: SweepData, oom: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per point: what it ran, how it ended and its figures (means over repeats); `oom` is
    matrix.yaml's include entry, the deliberate OOM point."""
    measured: dict[int, list[Any]] = {}
    for run in sweep.runs:
        if run.point is not None and run.metrics is not None:
            measured.setdefault(run.point, []).append(run.metrics)
    rows = []
    for row in sweep.rows:
        spec = sweep.point_specs.get(row.point)
        metrics = measured.get(row.point, [])
        flags = sorted({f.value for m in metrics for f in m.noise_flags})
        rows.append(
            {
                "point": row.point,
                "experiment": str(row.values.get("experiment", spec.experiment.value if spec else "")),
                "gpus": spec.number_gpus if spec else row.values.get("numberGpus"),
                "backend": str(row.values.get("distributedBackend", "")),
                "batchSize": spec.batch_size if spec else None,
                "modelMaxLength": spec.model_max_length if spec else None,
                "phase": str(row.phase),
                "repeats": row.repeats_done,
                "tokensPerSecond": row.train_tokens_per_second,
                "ci95": (
                    [row.objective_ci95_low, row.objective_ci95_high] if row.objective_ci95_low is not None else None
                ),
                "mfuPercent": row.mfu_percent,
                "gpuMemoryPeakPercent": row.gpu_memory_peak_percent,
                "noiseFlags": flags,
                "note": (OOM_NOTE + ("; " if row.message else "") if _is(row.values, oom) else "") + row.message,
            }
        )
    return rows


def _is(values: dict[str, Any], entry: dict[str, Any]) -> bool:
    return all(values.get(k, v) == v for k, v in entry.items()) and values.get("batchSize") == entry.get("batchSize")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def markdown(rows: list[dict[str, Any]], device: str, when: str) -> str:
    """The table docs/benchmarks.md shows, with where and when it was measured."""
    lines = [
        f"Measured {when} on {device} with `python bench/gpu/run.py` (bench/gpu/matrix.yaml). Tokens/s is the",
        "mean over repeats with its 95% t interval across them; MFU is against the device's dense peak.",
        "",
        "| point | experiment | GPUs | backend | phase | repeats | tokens/s | 95% interval | MFU % | peak mem % | noise | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f"{_num(r['ci95'][0])}-{_num(r['ci95'][1])}" if r["ci95"] else ""
        experiment = r["experiment"].removeprefix("finetune_").removesuffix("_benchmark-v1.0.0")
        note = r["note"].replace("|", "/")[:160]
        lines.append(
            f"| {r['point']} | {experiment} | {r['gpus']} | {r['backend']} | {r['phase']} | {r['repeats']} "
            f"| {_num(r['tokensPerSecond'])} | {ci} | {_num(r['mfuPercent'], 2)} | {_num(r['gpuMemoryPeakPercent'])} "
            f"| {', '.join(r['noiseFlags']) or 'clean'} | {note} |"
        )
    flags = sorted({f for r in rows for f in r["noiseFlags"]})
    if flags:
        lines += ["", *(f"- `{f}`: {describe(NoiseFlag(f))}" for f in flags)]
    return "\n".join(lines)


def write_docs(docs: Path, table: str) -> None:
    """Replace the section between the markers (appended, with a heading, when there is none)."""
    text = docs.read_text() if docs.exists() else ""
    block = f"{START}\n{table}\n{END}"
    if START in text and END in text:
        text = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + f"\n\n## GPU matrix\n\n{block}\n"
    docs.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8, help="N of the matrix's 1 and N GPUs (default 8)")
    parser.add_argument("--dry-run", action="store_true", help="run the matrix on CPU ranks with the tiny model")
    parser.add_argument("--home", type=Path, help="FTBENCH_HOME for the runs (default: a new temporary directory)")
    parser.add_argument("--python", help="interpreter that runs ftbench-trainer (default: per engine)")
    parser.add_argument("--out", type=Path, default=Path("gpu-results.json"), help="the results JSON file")
    parser.add_argument("--write-docs", type=Path, metavar="MD", help="replace the GPU matrix table in this file")
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="ftbench-gpu-matrix-"))
    home.mkdir(parents=True, exist_ok=True)
    doc = matrix_document(args.gpus, args.dry_run)
    run_sweep(doc, home, dry_run=args.dry_run, python=args.python)
    sweep = from_store(ResultsStore(home / "results.db"), load_catalog(), sweep=doc["metadata"]["name"]).sweeps[0]
    rows = point_rows(sweep, (doc["spec"].get("include") or [{}])[0])
    names = {m.environment.gpu_name for m in _results(home) if m.environment and m.environment.gpu_name}
    device = ", ".join(sorted(names)) or ("CPU ranks (dry run: tiny model, not GPU figures)" if args.dry_run else "CPU")
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    args.out.write_text(json.dumps({"device": device, "date": when, "dryRun": args.dry_run, "points": rows}, indent=2))
    table = markdown(rows, device, when)
    print(table)
    if args.write_docs:
        write_docs(args.write_docs, table)
    return 0


def _results(home: Path) -> list[TrainerResult]:
    return [TrainerResult.model_validate(r) for run in ResultsStore(home / "results.db").runs() for r in run.results]


if __name__ == "__main__":
    sys.exit(main())
