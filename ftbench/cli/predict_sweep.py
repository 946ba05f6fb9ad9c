"""`ftbench predict SWEEP`: every point of a FineTuneSweep predicted before it starts, and the sweep filled with
the fewest GPUs each point fits on (`--fill-gpus OUT`).

Each valid point gets what `ftbench predict` gives one experiment (the memory verdict, tokens/s and run
time: estimates), and with `--min-gpus` or `--fill-gpus` the fewest GPUs it is predicted to fit on at its
batchSize (ftbench.api.shapes.gpu_shapes). Every prediction is made in one predictor process per trainer
stack. The sweep's GPU-hours leave out the points predicted not to fit, as skipPredictedOom will.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ftbench.api.profile import ClusterProfile
from ftbench.api.shapes import Shape, gpu_shapes
from ftbench.catalog import Catalog
from ftbench.cli.main import UsageError
from ftbench.cli.table import format_table
from ftbench.contracts.plan import LaunchPlan
from ftbench.local.predict import prediction_plan, run_batch
from ftbench.local.runner import LocalRunError, TrainerPython, trainer_profile, trainer_python
from ftbench.predict.fleet_accuracy import question
from ftbench.predict.prediction import memory_fit
from ftbench.predict.throughput import predict_throughput, run_time
from ftbench.render.plan import PlanError
from ftbench.sweep.cost import sweep_cost
from ftbench.sweep.fill import TooManyPoints, filled_sweep
from ftbench.sweep.points import SweepPoint, expand, parse_sweep_document


@dataclass
class PointPrediction:
    point: SweepPoint
    percent: float | None = None  # device-level peak, % of the card
    fits: bool | None = None
    reason: str = ""  # why there is no memory verdict
    fewest: Shape | None = None
    shapes_tried: int = 0


def run_sweep(args: argparse.Namespace, body: Any, catalog: Catalog, profile: ClusterProfile) -> int:
    parsed = parse_sweep_document(body)
    if parsed.issues or parsed.spec is None or parsed.name is None:
        raise UsageError(f"{args.file} is invalid:\n" + "\n".join(f"  - {issue}" for issue in parsed.issues))
    expansion = expand(parsed.spec, catalog)
    if not expansion.ok:
        raise UsageError(f"{args.file} is invalid:\n" + "\n".join(f"  - {i}" for i in expansion.issues))
    shapes_too = bool(args.min_gpus or args.fill_gpus)
    try:
        rows = predict_points(args, parsed.name, expansion.points, catalog, profile, shapes_too)
    except (LocalRunError, PlanError) as err:
        raise UsageError(str(err)) from err
    cost = sweep_cost(expansion.points, catalog, {r.point.index: r.fits for r in rows})
    if args.fill_gpus:
        fewest = {r.point.index: (r.fewest.spec.number_gpus, r.fewest.spec.number_nodes) for r in rows if r.fewest}
        try:
            filled = filled_sweep(body, expansion.points, fewest)
        except TooManyPoints as err:
            raise UsageError(str(err)) from err
        _write(args.fill_gpus, filled)
        print(f"wrote {args.fill_gpus}: {len(fewest)} of {len(rows)} point(s) on the fewest GPUs predicted to fit",
              file=sys.stderr)  # fmt: skip
    if args.output == "json":
        print(json.dumps({"points": [_wire(r, catalog) for r in rows], "cost": cost.sentence()}, indent=2))
        return 0
    print(format_table(_HEADER, [_cells(r, catalog, shapes_too) for r in rows]))
    print(f"sweep {parsed.name}: {cost.sentence()}")
    print('note: estimates (docs/measurements.md, "Device memory" and "Predicted throughput")')
    return 0


def predict_points(
    args: argparse.Namespace,
    name: str,
    points: tuple[SweepPoint, ...],
    catalog: Catalog,
    profile: ClusterProfile,
    shapes_too: bool,
) -> list[PointPrediction]:
    """Every valid point's own prediction (and its GPU-count shapes), batched per trainer stack."""
    rows = [PointPrediction(p, reason="invalid point" if not p.valid else "") for p in points]
    jobs: dict[str, list[tuple[PointPrediction, Shape | None, LaunchPlan]]] = defaultdict(list)
    pythons: dict[str, TrainerPython] = {}
    for row in rows:
        spec = row.point.spec
        if spec is None or not row.point.valid:
            continue
        python = trainer_python(spec, args.python, log=lambda line: print(line, file=sys.stderr))
        pythons[python.path] = python
        runner = trainer_profile(profile, python)
        jobs[python.path].append((row, None, prediction_plan(spec, f"{name}-{row.point.index}", catalog, runner)))
        for i, shape in enumerate(gpu_shapes(spec, catalog, profile) if shapes_too else []):
            plan = prediction_plan(shape.spec, f"{name}-{row.point.index}-shape-{i}", catalog, runner)
            jobs[python.path].append((row, shape, plan))
    for path, batch in jobs.items():
        answers = run_batch([plan for _, _, plan in batch], pythons[path])
        for (row, candidate, _), predicted in zip(batch, answers, strict=True):
            target = candidate.spec if candidate is not None else row.point.spec
            assert target is not None
            asked = question(target, catalog, profile.calibration)
            fit = None if isinstance(predicted, str) else memory_fit(predicted, target.gpu_model, profile, asked)
            if candidate is None:
                row.fits = fit.fits if fit is not None else None
                row.percent = fit.device.percent if fit is not None and fit.device is not None else None
                row.reason = predicted if isinstance(predicted, str) else ("" if fit else "no GPU memory to compare")
                continue
            row.shapes_tried += 1
            if (
                fit is not None
                and fit.fits
                and (row.fewest is None or target.number_gpus < row.fewest.spec.number_gpus)
            ):
                row.fewest = candidate
    return rows


_HEADER = ("POINT", "VALUES", "PEAK % (EST)", "FITS", "TOK/S (EST)", "GPU-H (EST)", "FEWEST GPUS")


def _cells(row: PointPrediction, catalog: Catalog, shapes_too: bool) -> tuple[str, ...]:
    tps, hours = _throughput(row, catalog)
    fits = "" if row.fits is None else "yes" if row.fits else "no"
    fewest = row.fewest.describe() if row.fewest else ("none tried fits" if row.shapes_tried else "")
    return (
        str(row.point.index),
        row.point.describe(),
        f"{row.percent:.0f}" if row.percent is not None else row.reason[:40],
        fits,
        f"{tps:,.0f}" if tps is not None else "",
        f"{hours:.3g}" if hours is not None else "",
        fewest if shapes_too else "",
    )


def _throughput(row: PointPrediction, catalog: Catalog) -> tuple[float | None, float | None]:
    spec = row.point.spec
    t = predict_throughput(spec, catalog) if spec is not None and row.point.valid else None
    if spec is None or t is None:
        return None, None
    return t.tokens_per_second_estimate, run_time(spec, catalog, t).gpu_hours_estimate


def _wire(row: PointPrediction, catalog: Catalog) -> dict[str, Any]:
    tps, hours = _throughput(row, catalog)
    return {
        "point": row.point.index,
        "values": dict(row.point.values),
        "valid": row.point.valid,
        "predictedPercent": row.percent,
        "fits": row.fits,
        "reason": row.reason,
        "tokensPerSecondEstimate": tps,
        "gpuHoursEstimate": hours,
        "fewestGpus": row.fewest.spec.number_gpus if row.fewest else None,
        "fewestGpusNodes": row.fewest.spec.number_nodes if row.fewest else None,
        "shapesTried": row.shapes_tried,
    }


def _write(path: str, document: dict[str, Any]) -> None:
    try:
        Path(path).write_text(yaml.safe_dump(document, sort_keys=False))
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from err
