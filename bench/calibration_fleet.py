"""Does calibrating on a user's own runs help? Leave one model out of the fleet fit, calibrate on three of its rows.

    .venv/bin/python bench/calibration_fleet.py                 # the table
    .venv/bin/python bench/calibration_fleet.py --write-docs    # and into docs/benchmarks.md

For each model of ado's fleet sample A with at least `MIN_ROWS` rows that ran: the fleet's constants are
refitted without any of its rows (the memory terms with bench/fleet.py's fit, the throughput constants with
bench/fleet_throughput.py's), as for a model a user brings that the fleet never saw. Three of its rows play
the user's runs: `ftbench.predict.calibrate.fit_calibration` (what `ftbench calibrate` runs) fits the corrections on
them, and the model's other rows are predicted before (model left out) and after (calibrated). Each model is
tried with `DRAWS` different draws of three rows (seeded by the model's name); the errors are pooled over the
draws. Beside them, the bound of one per-model correction (`bound`): one tokens/s factor and one memory offset,
each fitted on all of the group's rows. Pure arithmetic on the stored predictions
(bench/results/fleet-sample-A.json): about a minute.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet
import fleet_throughput

from ftbench.predict.fit_folds import p90_or_none
from ftbench.predict.fit_memory import fit_constants
from ftbench.predict.fit_throughput import fit_points

SECTION = "fleet-calibration"
CALIBRATION_ROWS = 3
MIN_ROWS = CALIBRATION_ROWS + 3
DRAWS = 5
TARGETS = (10.0, 2.0)  # tokens/s median %, memory median pp (issue 60.3)


@dataclass(frozen=True)
class Row:
    line: int
    spec: Any  # FineTuneExperimentSpec
    judged: Any  # Judged
    point: Any  # Point


def rows(store: Path) -> list[Row]:
    """The rows that ran with both a memory prediction and a tokens/s: what a user's run records."""
    from ftbench.api.validation import validate_spec_dict
    from ftbench.catalog import load_catalog

    catalog = load_catalog()
    judged = {j.line: j for j in fleet.judge(store) if j.measured_percent is not None and j.prediction is not None}
    out = []
    for p in fleet_throughput.points(store):
        if p.line in judged:
            spec = validate_spec_dict(p.spec, catalog).spec
            if spec is not None:
                out.append(Row(p.line, spec, judged[p.line], p))
    return out


@dataclass(frozen=True)
class Outcome:
    label: str
    rows: int
    rate_before: list[float]
    rate_after: list[float]
    memory_before: list[float]
    memory_after: list[float]
    # the bound: one tokens/s factor and one memory offset fitted on all of the group's rows, in sample
    rate_bound: list[float]
    memory_bound: list[float]


def model_groups(all_rows: list[Row]) -> dict[str, list[Row]]:
    """Protocol A: each model's rows."""
    out: dict[str, list[Row]] = {}
    for r in all_rows:
        out.setdefault(r.spec.model, []).append(r)
    return {k: v for k, v in sorted(out.items()) if len(v) >= MIN_ROWS}


def setup_groups(all_rows: list[Row]) -> dict[str, list[Row]]:
    """Protocol B: each model's rows in one setup (experiment, GPUs, nodes), the batch and sequence varying."""
    out: dict[str, list[Row]] = {}
    for r in all_rows:
        s = r.spec
        method = s.experiment.value.split("_")[1]
        out.setdefault(f"{s.model}, {method}, {s.number_gpus} GPU(s) on {s.number_nodes} node(s)", []).append(r)
    return {k: v for k, v in sorted(out.items()) if len(v) >= MIN_ROWS}


def calibrate_group(label: str, mine: list[Row], fits: dict[str, tuple[Any, Any]]) -> Outcome:
    """`fits`: per model, the (memory, throughput) constants fitted without it."""
    from ftbench.api.profile import DEFAULT_GPU_MEMORY
    from ftbench.catalog import load_catalog
    from ftbench.predict.calibrate import (
        Asked,
        Observation,
        calibrated_device,
        fit_calibration,
        step_factor,
        throughput_constants,
    )

    catalog = load_catalog()
    model = mine[0].spec.model
    device, base = fits[model]
    out = Outcome(label, len(mine), [], [], [], [], *bound(mine, base, device))
    draw = random.Random(label)
    for _ in range(DRAWS):
        chosen = draw.sample(mine, CALIBRATION_ROWS)
        observations = [
            Observation(f"ado:{r.line}", r.spec, r.point.measured, r.judged.measured_percent, r.judged.prediction)
            for r in chosen
        ]
        calibration = fit_calibration(observations, catalog, DEFAULT_GPU_MEMORY, name="bench", fitted_at="-",
                                      base=base, device=device)  # fmt: skip
        constants = throughput_constants(calibration, base)
        for r in (r for r in mine if r not in chosen):
            asked = Asked.of(r.spec)
            before = r.point.model.predict(r.point.gpus, base).tokens_per_second_estimate
            after = r.point.model.predict(r.point.gpus, constants, step_factor(calibration, asked))
            out.rate_before.append(100 * r.point.error(before))
            out.rate_after.append(100 * r.point.error(after.tokens_per_second_estimate))
            gpu_model = r.spec.gpu_model
            gpu = DEFAULT_GPU_MEMORY[gpu_model]
            was = calibrated_device(r.judged.prediction, gpu_model, gpu, None, None, device).percent
            now = calibrated_device(r.judged.prediction, gpu_model, gpu, calibration, asked, device).percent
            out.memory_before.append(abs(was - r.judged.measured_percent))
            out.memory_after.append(abs(now - r.judged.measured_percent))
    return out


def bound(mine: list[Row], base: Any, device: Any) -> tuple[list[float], list[float]]:
    """The best any one per-model correction can do: the tokens/s factor and the memory offset (points of the card)
    that are each the median over all of the group's rows, and the rows' errors under them (in sample: the
    calibration sees three rows, this sees them all, so no calibration by one factor and one offset beats it)."""
    from ftbench.api.profile import DEFAULT_GPU_MEMORY
    from ftbench.predict.calibrate import calibrated_device

    ratios = [r.point.measured / r.point.model.predict(r.point.gpus, base).tokens_per_second_estimate for r in mine]
    factor = statistics.median(ratios)
    rate = [100 * abs(x / factor - 1) * factor / x for x in ratios]  # |factor - x| / x
    gaps = [
        r.judged.measured_percent - calibrated_device(r.judged.prediction, r.spec.gpu_model,
                                                      DEFAULT_GPU_MEMORY[r.spec.gpu_model], None, None, device).percent
        for r in mine
    ]  # fmt: skip
    offset = statistics.median(gaps)
    return rate, [abs(g - offset) for g in gaps]


def left_out_fits(models: set[str]) -> dict[str, tuple[Any, Any]]:
    """Per model, the fleet's memory and throughput constants fitted without any of its rows."""
    judged, pts = fleet.judge(fleet.STORE), fleet_throughput.points(fleet.STORE)
    return {
        m: (fit_constants([j for j in judged if j.spec["model"] != m]),
            fit_points([p for p in pts if p.spec["model"] != m]))
        for m in sorted(models)
    }  # fmt: skip


def table(title: str, outcomes: list[Outcome]) -> str:
    lines = [
        title,
        "",
        "| left out, then calibrated | rows | tokens/s median % before | after | p90 before | after | memory median pp "
        "before | after | p90 before | after | bound: tokens/s median % | memory median pp |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    met = reachable = 0
    for o in outcomes:
        cells = [statistics.median(o.rate_before), statistics.median(o.rate_after), p90_or_none(o.rate_before),
                 p90_or_none(o.rate_after), statistics.median(o.memory_before), statistics.median(o.memory_after),
                 p90_or_none(o.memory_before), p90_or_none(o.memory_after), statistics.median(o.rate_bound),
                 statistics.median(o.memory_bound)]  # fmt: skip
        met += cells[1] <= TARGETS[0] and cells[5] <= TARGETS[1]
        reachable += cells[8] <= TARGETS[0] and cells[9] <= TARGETS[1]
        lines.append(f"| {o.label} | {o.rows} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    pooled = [
        statistics.median([e for o in outcomes for e in getattr(o, k)])
        for k in ("rate_before", "rate_after", "memory_before", "memory_after")
    ]
    lines += [
        "",
        f"Pooled: tokens/s median {pooled[0]:.1f} % -> {pooled[1]:.1f} %, memory median {pooled[2]:.1f} -> "
        f"{pooled[3]:.1f} pp. {met} of {len(outcomes)} meet both targets (tokens/s <= {TARGETS[0]:.0f} %, memory "
        f"<= {TARGETS[1]:.0f} pp) after calibration; with one factor and one offset fitted on all of a group's rows "
        f"(the bound) {reachable} of {len(outcomes)} would.",
    ]
    return "\n".join(lines)


def report(all_rows: list[Row]) -> str:
    by_model, by_setup = model_groups(all_rows), setup_groups(all_rows)
    fits = left_out_fits({r.spec.model for r in all_rows})
    head = (
        f"Each model left out of the fleet fit, then calibrated on {CALIBRATION_ROWS} rows (`ftbench calibrate`'s fit: "
        f"a prediction takes the median correction of the model's runs nearest its spec) and its other rows "
        f"predicted; {DRAWS} draws of rows per group, errors pooled over the draws."
    )
    return "\n\n".join([
        head,
        table("A: three of the model's rows, any setup, predict its other rows (the issue's protocol).",
              [calibrate_group(k, v, fits) for k, v in by_model.items()]),
        table("B: three rows of one setup (model, method, GPUs, nodes), predict the setup's other batch and sequence "
              f"lengths (setups with at least {MIN_ROWS} rows).",
              [calibrate_group(k, v, fits) for k, v in by_setup.items()]),
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    body = report(rows(fleet.STORE))
    print(body)
    if args.write_docs:
        fleet_throughput._write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
