"""`ftbench predict FILE`: per-device peak memory of an experiment, predicted before it runs."""

from __future__ import annotations

import argparse
import itertools
import json
import sys

from ftbench.api.kinds import KIND, SWEEP_KIND
from ftbench.api.prediction_report import PredictionReport
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.rules.data import too_few_rows
from ftbench.api.shapes import Shape, ShapeAnswer, search
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import add_model_map, catalog_from_args, profile_from_arg, spec_from_body
from ftbench.cli.documents import read_one_document
from ftbench.cli.main import UsageError
from ftbench.cli.table import format_table
from ftbench.contracts.prediction import ROWS_NOTE_PREFIX, MemoryPrediction
from ftbench.local.home import ftbench_home, local_profile
from ftbench.local.predict import prediction_plan, run_batch, run_predictor
from ftbench.local.resident import idle_seconds
from ftbench.local.runner import LocalRunError, TrainerPython, trainer_profile, trainer_python
from ftbench.predict.fleet_accuracy import question
from ftbench.predict.prediction import memory_fit, prediction_report, rows_of
from ftbench.render.plan import PlanError

GIB = 2**30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict", help="predict an experiment's peak memory per device (no weights loaded, no GPU needed)"
    )
    p.add_argument("file", metavar="FILE", help="a FineTuneExperiment or FineTuneSweep YAML file (- for stdin)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--profile", metavar="FILE", help="cluster profile (GPU memory per model, model map)")
    add_model_map(p)
    p.add_argument("--python", metavar="PATH", help="interpreter that runs the predictor (default: per engine)")
    p.add_argument(
        "--min-gpus",
        action="store_true",
        help="also the fewest GPUs the spec fits on (at its batchSize) and the largest of batchSize x 1, 2, 4, ... "
        "that fits on its GPUs (doublings only): every shape predicted in one process (ado autoconf's question; slower); for a sweep, each point's "
        "fewest GPUs",
    )
    p.add_argument(
        "--fill-gpus",
        metavar="OUT",
        help="FineTuneSweep only: write to OUT the sweep with each point's numberGpus (and numberNodes) set to the "
        "fewest GPUs it is predicted to fit on (one include entry per point)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    profile = local_profile(profile_from_arg(args.profile), ftbench_home())
    body = read_one_document(args.file, f"{KIND} or {SWEEP_KIND}")
    if isinstance(body, dict) and body.get("kind") == SWEEP_KIND:
        from ftbench.cli.predict_sweep import run_sweep  # a sweep's modules: one spec's answer never imports them

        return run_sweep(args, body, catalog_from_args(args, catalog_for(profile)), profile)
    if args.fill_gpus:
        raise UsageError("--fill-gpus fills a FineTuneSweep's points; for one experiment, --min-gpus answers")
    spec, name, catalog = spec_from_body(args, body, catalog_for(profile))
    try:
        python = trainer_python(spec, args.python, log=lambda line: print(line, file=sys.stderr))
        plan = prediction_plan(spec, name, catalog, trainer_profile(profile, python))
        prediction = run_predictor(plan, python)
        shapes = smallest_shapes(spec, name, catalog, profile, python) if args.min_gpus else None
    except (LocalRunError, PlanError) as err:
        raise UsageError(str(err)) from err
    report = prediction_report(prediction, spec, catalog, profile)
    data = data_row(prediction, spec, catalog)
    if args.output == "json":
        wire = {**report.to_wire(), "data": data[1]}
        if shapes is not None:
            wire["shapes"] = {
                "fewestGpus": shapes.fewest.spec.number_gpus if shapes.fewest else None,
                "fewestGpusNodes": shapes.fewest.spec.number_nodes if shapes.fewest else None,
                "largestBatchSize": shapes.largest.spec.batch_size if shapes.largest else None,
                "shapesTried": shapes.tried,
            }
        print(json.dumps(wire, indent=2))
        return 0
    print(table(report, shapes, data))
    return 0


def data_row(prediction: MemoryPrediction, spec: FineTuneExperimentSpec, catalog: Catalog) -> tuple[str, str]:
    """The rows that train at the spec's length (exact: the model's own tokenizer, or the catalog's table), and
    the refusal the operator would give where they cannot fill one optimizer step."""
    rows = rows_of(prediction, spec, catalog)
    if rows is None:
        why = next((n for n in prediction.notes if n.startswith(ROWS_NOTE_PREFIX)), ROWS_NOTE_PREFIX + "not counted")
        return ("data", f"{spec.dataset_id}: {why.removeprefix(ROWS_NOTE_PREFIX)}")
    refusal = too_few_rows(spec, rows)
    return ("data", f"{spec.dataset_id}: {rows.sentence(spec)}" + (f". REFUSED: {refusal}" if refusal else ""))


def smallest_shapes(
    spec: FineTuneExperimentSpec, name: str, catalog: Catalog, profile: ClusterProfile, python: TrainerPython
) -> ShapeAnswer:
    """`ftbench.api.shapes.search`: round by round where a resident predictor answers, else every candidate in one
    predictor process; a shape without a verdict does not fit."""
    runner = trainer_profile(profile, python)
    named = itertools.count()

    def predict(shapes: list[Shape]) -> list[bool | None]:
        plans = [prediction_plan(s.spec, f"{name}-shape-{next(named)}", catalog, runner) for s in shapes]
        fits: list[bool | None] = []
        for shape, predicted in zip(shapes, run_batch(plans, python), strict=True):
            asked = question(shape.spec, catalog, profile.calibration)
            fit = None if isinstance(predicted, str) else memory_fit(predicted, shape.spec.gpu_model, profile, asked)
            fits.append(fit.fits if fit is not None else None)
        return fits

    return search(spec, catalog, profile, predict, in_rounds=idle_seconds(python.environment()) is not None)


def device_rows(report: PredictionReport) -> list[tuple[str, str]]:
    """The device-level peak as NVML counts it, its terms and the one that dominates (none on CPU); where terms the
    verdict leaves out would pass the card, what must fit first and those terms marked at risk."""
    fit = report.fit
    device = fit.device if fit else None
    if fit is None or device is None:
        return []
    risky = {r.name for r in fit.at_risk}
    if risky:
        share = 100 * fit.required_bytes / max(1, fit.capacity_bytes)
        head = (f"{fit.required_bytes / GIB:.2f} GiB must fit, {share:.0f} % of the card; with the terms at risk "
                "NVML's count would pass the card")  # fmt: skip
    else:
        head = f"{device.total_bytes / GIB:.2f} GiB, {device.percent:.0f} % of the card, dominated by {device.dominant}"
    rows = [("peak per device (NVML, estimate)", head)]
    rows += [
        (f"  {t.name}", f"{t.bytes / GIB:.2f} GiB" + (" (at risk)" if t.name in risky else "")) for t in device.terms
    ]
    if fit.fleet_accuracy is not None:
        rows.append(("  how sure (ado's fleet)", fit.fleet_accuracy.sentence()))
    return rows


def throughput_rows(report: PredictionReport) -> list[tuple[str, str]]:
    """Predicted tokens/s, step time, MFU and the run's time and GPU-hours (estimates, ftbench.predict.throughput)."""
    t, r = report.throughput, report.run_time
    if t is None or r is None:
        return [("tokens/s (estimate)", "not predicted: CPU ranks, or a GPU model or architecture ftbench cannot size")]
    sure = [("  how sure (ado's fleet)", t.accuracy.sentence())] if t.accuracy is not None else []
    return [
        ("tokens/s (estimate)", f"{t.tokens_per_second_estimate:,.0f} ({t.tokens_per_gpu_per_second_estimate:,.0f} per "
         f"GPU), step {t.step_seconds_estimate:.2f} s, MFU {t.mfu_percent_estimate:.0f} %, dominated by {t.dominant}"),
        *sure,
        ("run time (estimate)", f"{r.steps_estimate:,} steps, {r.seconds_estimate / 3600:.2f} h of training, "
         f"{r.gpu_hours_estimate:.2f} GPU-hours (bounded by {r.bounded_by}; model loading not included)"),
    ]  # fmt: skip


def calibration_row(report: PredictionReport) -> tuple[str, str]:
    """Which of the profile's calibrations the prediction used (ftbench calibrate), and what of it applied."""
    c = report.calibration
    if c is None:
        return ("calibration", "none: the fleet's constants (ftbench calibrate --profile FILE fits your cluster's)")
    applied = "; ".join(c.applied) or "nothing of it applies to this spec"
    return ("calibration", f"{c.name} ({c.runs} runs, fitted {c.fitted_at}): {applied}")


def table(report: PredictionReport, shapes: ShapeAnswer | None = None, data: tuple[str, str] | None = None) -> str:
    p = report.prediction
    s = p.split
    rows: list[tuple[str, str]] = [
        ("peak per device (tensors)", f"{p.peak_bytes / GIB:.2f} GiB, at the {p.phase} phase"),
        ("  parameters", f"{s.parameters_bytes / GIB:.2f} GiB"),
        ("  gradients", f"{s.gradients_bytes / GIB:.2f} GiB"),
        ("  optimizer state", f"{s.optimizer_bytes / GIB:.2f} GiB"),
        ("  activations and temporaries", f"{s.activations_bytes / GIB:.2f} GiB"),
        ("device", f"{p.device}, {p.world_size} rank(s), sharding {p.sharding}"),
        ("parameters (trainable)", f"{p.traced_parameters:,} ({p.trainable_parameters:,})"),
        *device_rows(report),
        (
            "verdict",
            report.fit.sentence()
            if report.fit
            else "no GPU memory to compare with (CPU, or GPU model not in the profile's gpuMemory)",
        ),
        *throughput_rows(report),
        calibration_row(report),
        *([data] if data is not None else []),
        *(shapes.sentences() if shapes is not None else []),
        ("predicted in", f"{p.seconds:.1f} s"),
    ]
    outside = report.fit.fleet_accuracy.outside_calibration if report.fit and report.fit.fleet_accuracy else []
    notes = "\n".join(f"note: {n}" for n in p.notes)
    notes += "".join(f"\nnote: outside the calibration: {line}" for line in outside)
    notes += '\nnote: the device-level peak is an estimate of what NVML counts (docs/measurements.md, "Device memory")'
    notes += (
        "\nnote: tokens/s is fitted on ado's A100 fleet, and its error there is in docs/benchmarks.md (\"ado's fleet: "
        'throughput before launch"); the model and its limits: docs/measurements.md, "Predicted throughput"'
    )
    return format_table(("PROPERTY", "VALUE"), rows) + ("\n" + notes if notes else "")
