"""`ftbench calibrate --profile FILE`: fit this cluster's corrections from its own runs into the profile.

Reads the runs that measured something (the local results store: ftbench's runs and imported ado rows;
`--ado CSV` adds ado rows directly; `--from-cluster` reads the cluster's FineTuneExperiments instead of the
local runs), traces each run's memory prediction in its engine's environment (`--skip-memory` fits the
throughput only, in seconds), fits the corrections (ftbench.predict.calibrate), prints them with their before/after
error on those runs, and writes the profile's `calibration` section (the rest of FILE is kept as written).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from ftbench.api.calibration import Calibration
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import load_checked_profile
from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import profile_from_arg
from ftbench.cli.main import UsageError
from ftbench.cli.source import add_cluster_options, cluster_errors, reads_cluster
from ftbench.cli.table import format_table
from ftbench.contracts.prediction import MAMBA_KERNELS_ENV
from ftbench.local.home import ftbench_home, local_profile, results_db
from ftbench.local.store import ResultsStore, RunRecord
from ftbench.predict.calibrate import Observation, fit_calibration

SUCCEEDED = "Succeeded"
MARK = '# written by ftbench calibrate (docs/measurements.md, "Calibrated by your own runs")'


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit this cluster's corrections to the predictions from its own runs and write them into a profile",
    )
    p.add_argument("--profile", metavar="FILE", required=True, help="the cluster profile to write (created if absent)")
    p.add_argument("--ado", metavar="CSV", action="append", default=[], help="also ado's rows from this CSV")
    p.add_argument("--name", help="the calibration's name (default: FILE's stem and today's date)")
    p.add_argument("--skip-memory", action="store_true", help="fit the throughput corrections only (no memory traces)")
    p.add_argument("--dry-run", action="store_true", help="print the corrections without writing FILE")
    add_cluster_options(p, "read the cluster's FineTuneExperiments (KUBECONFIG or in-cluster) instead of local runs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.profile)
    profile = local_profile(profile_from_arg(args.profile) if path.exists() else ClusterProfile(), ftbench_home())
    catalog = catalog_for(profile)
    observations = _observations(args, catalog)
    if not observations:
        raise UsageError("no run measured tokens/s or GPU memory on a GPU: run some first, or pass --ado CSV")
    if not args.skip_memory:
        observations = _traced(observations, catalog, profile)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    calibration = fit_calibration(
        observations,
        catalog,
        profile.gpu_memory,
        name=args.name or f"{path.stem}-{now.date().isoformat()}",
        fitted_at=now.isoformat().replace("+00:00", "Z"),
    )
    print(summary(calibration))
    if args.dry_run:
        return 0
    write_section(path, calibration)
    print(f"wrote the calibration section of {path} ({len(calibration.runs)} run(s)); use it: "
          f"ftbench predict SPEC --profile {path}")  # fmt: skip
    return 0


def _observations(args: argparse.Namespace, catalog: Catalog) -> list[Observation]:
    if reads_cluster(args):
        from ftbench.report.cluster import experiment_records

        with cluster_errors():
            records = experiment_records(args.namespace)
        out = [o for r in records if (o := from_record(r, f"cluster:{r.name}"))]
    else:
        store = ResultsStore(results_db())
        out = [o for r in store.runs() if (o := from_record(r, f"local:{r.id}"))]
        out += [o for a in store.ado_runs() if (o := from_ado(a.spec, a.is_valid, a.measured, f"ado:{a.id}"))]
    for file in args.ado:
        from ftbench.local.ado_rows import read_ado_csv

        try:
            rows = read_ado_csv(Path(file).read_text())
        except (OSError, UnicodeDecodeError, ValueError, KeyError) as err:
            raise UsageError(f"cannot read {file} as ado's CSV: {err}") from err
        name = Path(file).name
        out += [o for r in rows if r.spec and (o := from_ado(r.spec, r.is_valid, r.measured, f"ado:{name}:{r.line}"))]
    return out


def _gpu_spec(raw: dict[str, Any]) -> FineTuneExperimentSpec | None:
    try:
        spec = FineTuneExperimentSpec.model_validate(raw)
    except ValueError:
        return None
    return spec if spec.gpu_model and spec.number_gpus > 0 and spec.device in (None, "gpu") else None


def from_record(record: RunRecord, source: str) -> Observation | None:
    """A local or cluster run that succeeded on GPUs: its steady tokens/s and NVML peak (the last result's)."""
    spec = _gpu_spec(record.spec)
    if spec is None or record.status != SUCCEEDED or not record.results:
        return None
    metrics = record.results[-1].get("metrics") or {}
    rate, memory = metrics.get("steadyStateTokensPerSecond"), metrics.get("gpuMemoryUtilizationPeakPercent")
    if not rate and memory is None:
        return None
    return Observation(source, spec, float(rate) if rate else None, float(memory) if memory is not None else None)


def from_ado(raw: dict[str, Any], ran: bool, measured: dict[str, float], source: str) -> Observation | None:
    """An ado row that ran: its dataset tokens/s (every sample fills the sequence) and NVML peak."""
    spec = _gpu_spec(raw)
    if spec is None or not ran:
        return None
    rate, memory = measured.get("dataset_tokens_per_second"), measured.get("gpu_memory_utilization_peak")
    if not rate and memory is None:
        return None
    return Observation(source, spec, rate or None, memory)


def _traced(observations: list[Observation], catalog: Catalog, profile: ClusterProfile) -> list[Observation]:
    """Each observation with a memory figure, with its memory prediction traced in its engine's environment (one
    predictor process per environment; ado's rows with its images' Mamba kernels, as ado ran them)."""
    import dataclasses

    from ftbench.local.predict import prediction_plan, run_batch
    from ftbench.local.runner import LocalRunError, trainer_profile, trainer_python
    from ftbench.render.plan import PlanError

    groups: dict[tuple[str, bool], list[int]] = defaultdict(list)
    pythons = {}
    for i, o in enumerate(observations):
        if o.memory_percent is None:
            continue
        python = trainer_python(o.spec, None, log=lambda line: print(line, file=sys.stderr))
        pythons[python.path] = python
        groups[(python.path, o.source.startswith("ado:"))].append(i)
    out = list(observations)
    for (path, ado), members in groups.items():
        python = pythons[path]
        runner = trainer_profile(profile, python)
        plans, kept = [], []
        for i in members:
            try:
                plans.append(prediction_plan(observations[i].spec, f"calibrate-{i}", catalog, runner))
                kept.append(i)
            except PlanError as err:
                print(f"{observations[i].source}: no memory prediction: {err}", file=sys.stderr)
        previous = os.environ.get(MAMBA_KERNELS_ENV)
        os.environ[MAMBA_KERNELS_ENV] = "true" if ado else (previous or "")
        try:
            answers = run_batch(plans, python)
        except LocalRunError as err:
            raise UsageError(str(err)) from err
        finally:
            if previous is None:
                os.environ.pop(MAMBA_KERNELS_ENV, None)
            else:
                os.environ[MAMBA_KERNELS_ENV] = previous
        for i, answer in zip(kept, answers, strict=True):
            if isinstance(answer, str):
                print(f"{observations[i].source}: no memory prediction: {answer}", file=sys.stderr)
            else:
                out[i] = dataclasses.replace(observations[i], prediction=answer)
    return out


def summary(calibration: Calibration) -> str:
    gib = 2**30
    rows: list[tuple[str, str, str]] = []
    for family, f in calibration.gpu_families.items():
        if f.compute_efficiency is not None:
            rows.append((f"GPU family {family}", "compute efficiency", f"x{f.compute_efficiency:.3f} ({f.runs} runs)"))
        if f.context_offset_bytes is not None:
            rows.append((f"GPU family {family}", "context", f"{f.context_offset_bytes / gib:+.2f} GiB ({f.runs} runs)"))
    for fabric, value in calibration.fabrics.items():
        rows.append((f"fabric {fabric}", "inter-node bandwidth per GPU", f"{value / 1e9:.1f} GB/s"))
    for model, m in calibration.models.items():
        if m.step_time_factor is not None:
            rows.append((f"model {model}", "step time", f"x{m.step_time_factor:.3f} ({m.runs} runs)"))
        if m.reserve_scale is not None:
            rows.append((f"model {model}", "allocator reserve", f"x{m.reserve_scale:.2f} ({m.runs} runs)"))
    table = format_table(("WHAT", "TERM", "CORRECTION"), rows) if rows else "no correction: the runs say nothing new"
    unit = {"percent": "%", "percentagePoints": "pp"}
    errors = format_table(
        ("PREDICTED", "RUNS", "MEDIAN BEFORE", "P90 BEFORE", "MEDIAN AFTER", "P90 AFTER"),
        [(e.quantity, str(e.runs), *(f"{v:.1f} {unit[e.unit]}" for v in (e.median_before, e.p90_before,
          e.median_after, e.p90_after))) for e in calibration.errors],
    )  # fmt: skip
    return (
        f"calibration {calibration.name} from {len(calibration.runs)} run(s)\n{table}\n\n"
        f"|predicted - measured| on those runs (in sample):\n{errors}"
    )


def write_section(path: Path, calibration: Calibration) -> None:
    """FILE with its top-level `calibration:` block replaced (or added), everything else kept as written; the
    result is checked as the operator checks a profile before it is written."""
    lines = path.read_text().splitlines() if path.exists() else []
    kept, skipping = [], False
    for line in (line for line in lines if line != MARK):
        if line.startswith("calibration:"):
            skipping = True
            continue
        if skipping and (not line.strip() or line[0] in " #-"):
            continue
        skipping = False
        kept.append(line)
    block = yaml.safe_dump({"calibration": calibration.to_wire()}, sort_keys=False).rstrip()
    text = "\n".join([*kept, MARK, block]).lstrip("\n") + "\n"
    load_checked_profile(text, str(path))
    path.write_text(text)
