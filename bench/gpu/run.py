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

A lent single-GPU machine with no hub access and no fms-hf-tuning environment runs it with the
overrides below, e.g. ``--gpus 1 --engine trl --gpu-model NVIDIA-H200 --random-weights --max-steps 20
--repeats 2``: `--random-weights` saves the catalog architecture with random weights under the run's
model root first (ftbench_trainer.random_weights: the step's arithmetic and memory are the
architecture's, the tokenizer is ftbench's), and the table's heading names every override.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ftbench.catalog import load_catalog
from ftbench.contracts import env as E
from ftbench.contracts.quality import NoiseFlag
from ftbench.contracts.results import TrainerResult
from ftbench.local.store import ResultsStore
from ftbench.report.data import SweepData, from_store
from ftbench.stats.noise import describe
from ftbench.stats.results import metric_interval

MATRIX = Path(__file__).with_name("matrix.yaml")
SECTION = "gpu-matrix"  # docs/benchmarks.md's table between <!-- SECTION:start --> and <!-- SECTION:end -->
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
STOP_GRACE_SECONDS = 60.0  # --stop-after: how long the sweep may take to stop its trainer


def matrix_document(
    gpus: int, dry_run: bool, path: Path = MATRIX, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The sweep to run: the matrix with N = `gpus`, or its CPU stand-in; `overrides` replace fields
    of the template (engine, fmsHfTuningVersion, model, gpuModel, attentionImplementation, maxSteps,
    warmupSteps) or, for "repeats", the sweep's."""
    doc = yaml.safe_load(path.read_text())
    spec = doc["spec"]
    n = min(gpus, DRY_RANKS) if dry_run else gpus  # a dry run of a 1-GPU machine's matrix has one rank
    spec["matrix"]["numberGpus"] = sorted({1, n})
    multi = [e for e in spec.get("exclude") or [] if e.get("numberGpus", 1) != 1]  # the N-GPU excludes
    spec["exclude"] = [e for e in spec.get("exclude") or [] if e not in multi] + (
        [e | {"numberGpus": n} for e in multi] if n > 1 else []
    )
    if dry_run:
        _dry(spec)
    spec["repeats"] = (overrides or {}).get("repeats", spec["repeats"])
    spec["template"] |= {k: v for k, v in (overrides or {}).items() if k != "repeats"}
    return doc


def _dry(spec: dict[str, Any]) -> None:
    """The matrix's CPU stand-in: the tiny model on CPU ranks, one repeat."""
    spec["template"] = {k: v for k, v in spec["template"].items() if k != "gpuModel"} | DRY_TEMPLATE
    for entry in spec.get("include") or []:  # the OOM point runs as an ordinary point on CPU, still its own
        entry.pop("modelMaxLength", None)
        entry["batchSize"] = 2 * DRY_TEMPLATE["batchSize"]
    spec["repeats"] = 1


def random_weights(doc: dict[str, Any], home: Path, python: str | None) -> None:
    """Save the template model's catalog architecture with random weights where the local model root
    resolves it (FTBENCH_HOME/models/<weights>), in the template's dtype, on the GPU when there is one."""
    template = doc["spec"]["template"]
    entry = load_catalog().models[template["model"]]
    ref = entry.weights.vanilla
    if entry.architecture is None or ref is None or entry.weights.is_hub_id(ref):
        raise SystemExit(
            f"--random-weights: model {template['model']} needs a catalog architecture and vanilla weights under "
            "the model root (not a hub id)"
        )
    target = home / "models" / ref
    command = [python or sys.executable, "-m", "ftbench_trainer.random_weights", str(target)]
    command += ["--architecture", json.dumps(entry.architecture), "--dtype", template.get("torchDtype", "bfloat16")]
    subprocess.run(command, check=True)


def weights_note(model: str) -> str:
    """The line the table's heading adds for --random-weights."""
    return (
        f"Weights: {model}'s catalog architecture with random weights and ftbench's byte-level "
        "tokenizer (`--random-weights`): the step's arithmetic and memory are the model's, its loss is not."
    )


def run_sweep(
    doc: dict[str, Any], home: Path, *, entries: int | None, python: str | None, stop_after: float | None = None
) -> None:
    """`ftbench sweep` in its own process with FTBENCH_HOME = `home`; stopped after `stop_after`
    seconds when given (a lease's end), and the table then shows what finished by then."""
    path = home / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    command = [sys.executable, "-m", "ftbench", "sweep", str(path), "-o", "json"]
    command += ["--dataset-entries", str(entries)] if entries else []
    command += ["--python", python] if python else []
    env = {**os.environ, E.FTBENCH_HOME: str(home)}
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = sweep.communicate(timeout=stop_after)
    except subprocess.TimeoutExpired:
        # Ctrl-C as a user gives it: the sweep stops its trainer between steps and records the run Interrupted.
        sweep.send_signal(signal.SIGINT)
        try:
            sweep.communicate(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            sweep.kill()
            sweep.communicate()
        print(
            f"stopped the sweep after {stop_after:.0f} s (--stop-after): the table shows what finished", file=sys.stderr
        )
        return
    if sweep.returncode not in (0, 1):  # 1: some point failed, which the table shows
        raise SystemExit(f"ftbench sweep exited {sweep.returncode}:\n{stderr[-3000:]}")


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
        steady = metric_interval(metrics, "steadyStateTokensPerSecond") if metrics else None
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
                "steadyTokensPerSecond": steady.estimate
                if steady
                else _mean([m.steady_state_tokens_per_second for m in metrics]),
                "steadyCi95": [steady.low, steady.high] if steady else None,
                "mfuPercent": row.mfu_percent,
                "gpuMemoryPeakPercent": row.gpu_memory_peak_percent,
                "memoryPredictionErrorPercent": _mean([m.prediction_error_percent for m in metrics]),
                "noiseFlags": flags,
                "note": (OOM_NOTE + ("; " if row.message else "") if _is(row.values, oom) else "") + row.message,
            }
        )
    return rows


def _mean(values: list[float | None]) -> float | None:
    """The mean of the repeats that have the figure (None when none has)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _is(values: dict[str, Any], entry: dict[str, Any]) -> bool:
    return all(values.get(k, v) == v for k, v in entry.items()) and values.get("batchSize") == entry.get("batchSize")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def markdown(rows: list[dict[str, Any]], device: str, when: str, command: str = "", notes: tuple[str, ...] = ()) -> str:
    """The table docs/benchmarks.md shows, with where, when and how it was measured."""
    lines = [
        f"Measured {when} on {device} with `python bench/gpu/run.py{command}` (bench/gpu/matrix.yaml). Run",
        "tokens/s is trainTokensPerSecond (tokens over the whole train_runtime, warmup included: ado's figure),",
        "steady tokens/s the measured window after warmupSteps; each is the mean over repeats with its 95% t",
        "interval across them. MFU is over train_runtime, against the device's dense peak;",
        "mem pred err % is `ftbench predict`'s peak (an estimate, made after the run at its batch shape) against",
        "the measured peak (the GPU allocator's, else the CPU tensor tracker's), mean over repeats.",
        *notes,
        "",
        "| point | experiment | GPUs | backend | phase | repeats | run tokens/s | 95% interval | steady tokens/s "
        "| 95% interval | MFU % | peak mem % | mem pred err % | noise | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci, steady_ci = (f"{_num(c[0])}-{_num(c[1])}" if c else "" for c in (r["ci95"], r["steadyCi95"]))
        experiment = r["experiment"].removeprefix("finetune_").removesuffix("_benchmark-v1.0.0")
        note = r["note"].replace("|", "/")[:160]
        lines.append(
            f"| {r['point']} | {experiment} | {r['gpus']} | {r['backend']} | {r['phase']} | {r['repeats']} "
            f"| {_num(r['tokensPerSecond'])} | {ci} | {_num(r['steadyTokensPerSecond'])} | {steady_ci} "
            f"| {_num(r['mfuPercent'], 2)} | {_num(r['gpuMemoryPeakPercent'])} "
            f"| {_num(r['memoryPredictionErrorPercent'])} "
            f"| {', '.join(r['noiseFlags']) or 'clean'} | {note} |"
        )
    flags = sorted({f for r in rows for f in r["noiseFlags"]})
    if flags:
        lines += ["", *(f"- `{f}`: {describe(NoiseFlag(f))}" for f in flags)]
    return "\n".join(lines)


def write_docs(docs: Path, table: str, section: str = SECTION) -> None:
    """Replace the section between its markers (appended, with a heading, when there is none)."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    text = docs.read_text() if docs.exists() else ""
    block = f"{start}\n{table}\n{end}"
    if start in text and end in text:
        text = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
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
    parser.add_argument(
        "--section", default=SECTION, help=f"which table of --write-docs: its markers' name (default {SECTION})"
    )
    lease = parser.add_argument_group("overrides, to fit a machine or a lease (the table's heading names them)")
    lease.add_argument("--engine", choices=("fms-hf-tuning", "trl"), help="the template's engine")
    lease.add_argument(
        "--fms-version", dest="fmsHfTuningVersion", help="the template's fmsHfTuningVersion (engine fms-hf-tuning)"
    )
    lease.add_argument("--model", help="the template's catalog model")
    lease.add_argument("--gpu-model", dest="gpuModel", help="the template's gpuModel, e.g. NVIDIA-H200")
    lease.add_argument(
        "--attention",
        dest="attentionImplementation",
        help="the template's attentionImplementation (sdpa: no flash-attn)",
    )
    lease.add_argument("--max-steps", dest="maxSteps", type=int, help="the template's maxSteps")
    lease.add_argument("--warmup-steps", dest="warmupSteps", type=int, help="the template's warmupSteps")
    lease.add_argument("--repeats", type=int, help="the sweep's repeats")
    lease.add_argument(
        "--stop-after", type=float, metavar="SECONDS", help="stop the sweep then and tabulate what finished"
    )
    lease.add_argument("--dataset-entries", type=int, help="generate only N dataset entries (dry run: 64)")
    lease.add_argument(
        "--random-weights", action="store_true", help="save the model's architecture with random weights first"
    )
    parser.add_argument(
        "--tabulate",
        action="store_true",
        help="tabulate the sweep --home's store holds instead of running it (a lent machine's store brought back; "
        "give the overrides it ran with, which the heading names)",
    )
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="ftbench-gpu-matrix-"))
    home.mkdir(parents=True, exist_ok=True)
    fields = (
        "engine",
        "fmsHfTuningVersion",
        "model",
        "gpuModel",
        "attentionImplementation",
        "maxSteps",
        "warmupSteps",
        "repeats",
    )
    overrides = {k: getattr(args, k) for k in fields if getattr(args, k) is not None}
    doc = matrix_document(args.gpus, args.dry_run, overrides=overrides)
    notes = (weights_note(doc["spec"]["template"]["model"]),) if args.random_weights else ()
    if not args.tabulate:
        if args.random_weights:
            random_weights(doc, home, args.python)
        entries = args.dataset_entries or (64 if args.dry_run else None)
        run_sweep(doc, home, entries=entries, python=args.python, stop_after=args.stop_after)
    store = ResultsStore(home / "results.db")
    sweep = from_store(store, load_catalog(), sweep=doc["metadata"]["name"]).sweeps[0]
    rows = point_rows(sweep, (doc["spec"].get("include") or [{}])[0])
    runs = store.runs()
    results = [TrainerResult.model_validate(r) for run in runs for r in run.results]
    gpus = {m.environment.gpu_name for m in results if m.environment and m.environment.gpu_name}
    device = ", ".join(sorted(gpus)) or ("CPU ranks (dry run: tiny model, not GPU figures)" if args.dry_run else "CPU")
    finished = [r.finished_at for r in runs if r.finished_at]
    when = max(finished)[:10] if finished else datetime.now(UTC).strftime("%Y-%m-%d")
    args.out.write_text(json.dumps({"device": device, "date": when, "dryRun": args.dry_run, "points": rows}, indent=2))
    table = markdown(rows, device, when, _shown(argv if argv is not None else sys.argv[1:]), notes)
    print(table)
    if args.write_docs:
        write_docs(args.write_docs, table, args.section)
    return 0


def _shown(argv: list[str]) -> str:
    """The command line's arguments that shape the figures (not where the outputs went)."""
    shown, skip = [], False
    for arg in argv:
        local = arg.split("=")[0] in ("--out", "--write-docs", "--section", "--home", "--python", "--tabulate")
        if not (skip or local):
            shown.append(arg)
        skip = local and "=" not in arg and arg != "--tabulate"
    return "".join(f" {a}" for a in shown)


if __name__ == "__main__":
    sys.exit(main())
