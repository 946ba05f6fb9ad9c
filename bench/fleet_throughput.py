"""ftbench's throughput prediction held against ado's fleet: steady tokens/s of real A100 runs.

    .venv/bin/python bench/fleet_throughput.py fit                      # the efficiency's coefficients
    .venv/bin/python bench/fleet_throughput.py tabulate --write-docs    # the table in docs/benchmarks.md

Reads the rows `bench/fleet.py predict` stored (bench/results/fleet-sample-A.json: the spec of every clean
row and what ado measured) and predicts each row that ran with `ftbench.api.throughput` (pure arithmetic:
no trace, no environment), against ado's `dataset_tokens_per_second` (every sample of these datasets fills
the sequence length, so it is the padded tokens/s ftbench predicts).

`fit` finds the model's constants (ftbench.api.throughput.FITTED) together: Levenberg-Marquardt on log
tokens/s over every clean row that ran, Huber-weighted (rows farther than 0.3 in log from the fit weigh
less: ado's table has configurations measured twice at rates 2-12x apart), from a fixed neutral start.
`tabulate` states the error of FITTED on the same rows and a 5-fold cross-validated error (each fifth
predicted by constants fitted on the other four), the estimate of what rows outside the fit will see.
Calibrate on sample A only: a disjoint sample of ado's table is kept aside to check the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import (
    DOCS,
    GROUPED,
    MODEL_LEFT_OUT,
    STORE,
    _fmt,
    _p90,
    clean,
    family,
    grouped_folds,
    models_left_out,
    write_generated,
)

SECTION = "fleet-throughput"


@dataclass(frozen=True)
class Point:
    line: int
    spec: dict[str, Any]
    measured: float  # ado's dataset_tokens_per_second
    model: Any  # ftbench.api.throughput.StepModel

    @property
    def gpus(self) -> int:
        return int(self.spec["numberGpus"])

    @property
    def nodes(self) -> int:
        return int(self.spec["numberNodes"])

    def error(self, predicted: float) -> float:
        return abs(predicted - self.measured) / self.measured


def points(store: Path) -> list[Point]:
    return points_of(json.loads(store.read_text())["rows"])


def sample_rows(sample: Path) -> list[dict[str, Any]]:
    """A fleet sample's clean rows as a store holds them, without the memory predictions (what throughput needs)."""
    from ftbench.local.ado_rows import read_ado_csv

    return [
        {"line": ado.line, "spec": ado.spec, "isValid": ado.is_valid, "measured": ado.measured}
        for ado in read_ado_csv(sample.read_text())
        if clean(ado.spec)
    ]


def points_of(rows: list[dict[str, Any]]) -> list[Point]:
    from ftbench.api.throughput import step_model
    from ftbench.api.validation import validate_spec_dict
    from ftbench.catalog import load_catalog

    catalog, out = load_catalog(), []
    for row in rows:
        tps = row["measured"].get("dataset_tokens_per_second")
        if not row["isValid"] or not tps or not clean(row["spec"]):
            continue
        report = validate_spec_dict(row["spec"], catalog)
        model = step_model(report.spec, catalog) if report.spec is not None else None
        if model is not None:
            out.append(Point(row["line"], row["spec"], float(tps), model))
    return out


HUBER = 0.3
LAYER_COSTS = ("one_gpu_full", "one_gpu_peft", "sharded_full", "sharded_peft")


def _constants(theta: Any) -> Any:
    """The parameter vector as ThroughputConstants: efficiency coefficients as they are, the rest as logs."""
    from ftbench.api import throughput as tp

    names = list(tp.FITTED.efficiency)
    k = len(names)
    # clipped: a constant no row of a fold depends on (a model left out) may drift without bound
    rest = [math.exp(min(max(float(v), -60.0), 60.0)) for v in theta[k:]]
    return tp.ThroughputConstants(
        efficiency={n: float(theta[i]) for i, n in enumerate(names)},
        layer_seconds=dict(zip(LAYER_COSTS, rest[:4], strict=True)),  # type: ignore[arg-type]
        expert_seconds=rest[4],
        expert_token_seconds=rest[5],
        expert_full_factor=rest[6],
        rdma_bytes=rest[7],
        tcp_bytes=rest[8],
    )


def _start() -> list[float]:
    from ftbench.api import throughput as tp

    coefficients = [-0.5 if n in ("dense", "moe", "hybrid") else 0.0 for n in tp.FITTED.efficiency]
    return coefficients + [math.log(v) for v in (5e-3, 5e-3, 5e-3, 5e-3, 1e-4, 1e-8, 1.0, 40e9, 8e9)]


def _log_errors(pts: list[Point], constants: Any) -> Any:
    import numpy as np

    return np.array([math.log(p.model.step_tokens / p.model.seconds(constants).step / p.measured) for p in pts])


def fit_points(pts: list[Point], iterations: int = 100) -> Any:
    """Levenberg-Marquardt with a forward-difference Jacobian, Huber weights recomputed every iteration."""
    import numpy as np

    theta, damping = np.array(_start()), 1e-2
    residual = _log_errors(pts, _constants(theta))
    for _ in range(iterations):
        jacobian = np.empty((len(pts), len(theta)))
        for j in range(len(theta)):
            moved = theta.copy()
            moved[j] += 1e-5
            jacobian[:, j] = (_log_errors(pts, _constants(moved)) - residual) / 1e-5
        size = np.abs(residual)
        weights = np.sqrt(np.where(size < HUBER, 1.0, HUBER / np.maximum(size, 1e-12)))
        a = jacobian * weights[:, None]
        h = a.T @ a
        step = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -a.T @ (residual * weights))
        trial = _log_errors(pts, _constants(theta + step))
        if np.sum((weights * trial) ** 2) < np.sum((weights * residual) ** 2):
            theta, residual, damping = theta + step, trial, damping / 3
        else:
            damping *= 4
    return _constants(theta)


def fit(store: Path) -> Any:
    """FITTED as the fleet gives it, rounded as ftbench.api.throughput writes it."""
    from ftbench.api import throughput as tp

    c = fit_points(points(store))
    fitted = tp.ThroughputConstants(
        efficiency={n: round(v, 3) for n, v in c.efficiency.items()},
        layer_seconds={n: _sig(v) for n, v in c.layer_seconds.items()},
        expert_seconds=_sig(c.expert_seconds),
        expert_token_seconds=_sig(c.expert_token_seconds),
        expert_full_factor=_sig(c.expert_full_factor),
        rdma_bytes=_sig(c.rdma_bytes),
        tcp_bytes=_sig(c.tcp_bytes),
    )
    fitted = dataclasses.replace(fitted, gpu_efficiency=fit_gpu_efficiency(own_runs(), fitted))
    print(fitted)
    return fitted


def _sig(value: float) -> float:
    return float(f"{value:.2g}")


# ftbench's own runs on lent GPUs: the results stores bench/gpu/ brought back (bench/results/*/README.md)
OWN_STORES = (
    ("H100, trl", "gpu-h100-2026-11-26/call1/trl/results.db"),
    ("H100, fms-hf-tuning 3.2.2", "gpu-h100-2026-11-26/call2/fms-hf-tuning/results.db"),
    ("H200, trl", "gpu-h200-2026-11-26/results.db"),
)
OWN_SECTION = "own-gpu-throughput"


@dataclass(frozen=True)
class OwnRun:
    store: str
    experiment: str
    measured: float  # the run's steady tokens/s
    model: Any  # ftbench.api.throughput.StepModel


def own_runs() -> list[OwnRun]:
    """Every successful run of OWN_STORES with a steady tokens/s (each store read from a copy: opening one
    may add tables)."""
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.api.throughput import step_model
    from ftbench.catalog import load_catalog
    from ftbench.local.store import ResultsStore

    catalog, out = load_catalog(), []
    for label, relative in OWN_STORES:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "results.db"
            shutil.copy(STORE.parent / relative, copy)
            runs = ResultsStore(copy).runs()
        for run in runs:
            spec = FineTuneExperimentSpec.model_validate(run.spec)
            steady = [(r.get("metrics") or {}).get("steadyStateTokensPerSecond") for r in run.results]
            model = step_model(spec, catalog)
            if run.status == "Succeeded" and steady and steady[-1] and model is not None:
                out.append(OwnRun(label, spec.experiment.value, float(steady[-1]), model))
    return out


def fit_gpu_efficiency(runs: list[OwnRun], constants: Any) -> dict[str, float]:
    """Per GPU family, the median share of the A100-calibrated efficiency its runs reached: the compute time
    the model predicts over the compute time the measured step leaves once overhead and communication are
    taken out."""
    base = dataclasses.replace(constants, gpu_efficiency={})
    shares: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        t = run.model.seconds(base)
        measured_step = run.model.step_tokens / run.measured
        shares[run.model.gpu_family].append(t.compute / (measured_step - t.overhead - t.exposed))
    return {family: round(statistics.median(values), 3) for family, values in sorted(shares.items())}


def tabulate_own(write_docs: bool) -> str:
    from ftbench.api import throughput as tp

    groups: dict[tuple[str, str], list[OwnRun]] = defaultdict(list)
    for run in own_runs():
        groups[(run.store, run.experiment)].append(run)
    a100 = dataclasses.replace(tp.FITTED, gpu_efficiency={})
    lines = [
        "| GPU, engine | experiment | runs | measured steady tokens/s | predicted, A100 calibration | error % | "
        "predicted | error % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (store, experiment), runs in sorted(groups.items()):
        measured = statistics.fmean(r.measured for r in runs)
        model = runs[0].model
        cells = []
        for constants in (a100, tp.FITTED):
            predicted = model.step_tokens / model.seconds(constants).step
            cells += [f"{predicted:,.0f}", f"{100 * (predicted - measured) / measured:+.1f}"]
        lines.append(f"| {store} | {experiment.removeprefix('finetune_')} | {len(runs)} | {measured:,.0f} | "
                     f"{' | '.join(cells)} |")  # fmt: skip
    shares = ", ".join(f"{k} {v}" for k, v in tp.FITTED.gpu_efficiency.items())
    lines += ["", f"Efficiency against the A100 calibration (`gpu_efficiency`, fitted on these runs): {shares}."]
    body = "\n".join(lines)
    if write_docs:
        _write_section(OWN_SECTION, body)
    return body


def _write_section(section: str, body: str) -> None:
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    head, rest = DOCS.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    DOCS.write_text(f"{head}{start}\n{body}\n{end}{tail}")


def publish(section: str, body: str, write_docs: bool) -> None:
    """A bench's table: printed, and with --write-docs into its docs/benchmarks.md section."""
    print(body)
    if write_docs:
        _write_section(section, body)


def held_out_errors(pts: list[Point], split: dict[int, str]) -> list[float]:
    """Each row's error when the constants are fitted without its part of `split` (fleet.grouped_folds: whole
    configurations; fleet.models_left_out: whole models)."""
    errors: dict[int, float] = {}
    for part in sorted(set(split.values())):
        constants = fit_points([p for p in pts if split[p.line] != part])
        for p in pts:
            if split[p.line] == part:
                errors[p.line] = p.error(p.model.step_tokens / p.model.seconds(constants).step)
    return [errors[p.line] for p in pts]


def throughput_bands(pts: list[Point], errors: list[float], by_kind: bool) -> dict[tuple[str, str], Any]:
    """ftbench.api.fleet_accuracy's THROUGHPUT_*BANDS: per scope (and model kind) the rows and their median and 90th
    percentile error in percent."""
    from ftbench.api.fleet_accuracy import ANY_KIND, DENSE, MOE, SCOPES, kind, scope
    from ftbench.catalog import load_catalog

    models = load_catalog().models
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p, e in zip(pts, errors, strict=True):
        where = scope(p.gpus, p.nodes)
        groups[(where, ANY_KIND)].append(100 * e)
        if by_kind:
            groups[(where, kind(models[p.spec["model"]].architecture) or ANY_KIND)].append(100 * e)
    order = {k: i for i, k in enumerate((DENSE, MOE, ANY_KIND))}
    out = {}
    for key, values in sorted(groups.items(), key=lambda kv: (SCOPES.index(kv[0][0]), order[kv[0][1]])):
        out[key] = (len(values), round(statistics.median(values), 1), round(_p90(values) or 0.0, 1))
    return out


def validated(store: Path) -> tuple[list[Point], dict[str, list[float]]]:
    """The rows, and each row's error in sample, under grouped folds and with its model left out."""
    pts = points(store)
    specs = {p.line: p.spec for p in pts}
    return pts, {
        "in sample": [p.error(p.model.predict(p.gpus).tokens_per_second_estimate) for p in pts],
        GROUPED: held_out_errors(pts, grouped_folds(specs)),
        MODEL_LEFT_OUT: held_out_errors(pts, models_left_out(specs)),
    }


def tabulate(store: Path, write_docs: bool) -> str:
    body, found = report(*validated(store))
    if write_docs:
        _write_section(SECTION, body)
        write_generated("throughput-accuracy", found)
    return body


def report(pts: list[Point], errors: dict[str, list[float]]) -> tuple[str, dict[str, Any]]:
    """The docs section and the bands it states (ftbench.api.fleet_accuracy's THROUGHPUT_*)."""
    fitted, held, unseen = errors["in sample"], errors[GROUPED], errors[MODEL_LEFT_OUT]
    groups: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for p, e, h in zip(pts, fitted, held, strict=True):
        groups[(family(p.spec), p.gpus)].append((e, h))
    lines = [
        f"{len(pts)} clean rows that ran, each predicted (`ftbench.api.throughput`, pure arithmetic); |predicted - "
        "measured| / measured steady tokens/s, in sample (the constants fitted on every row), under "
        f"{GROUPED} (configurations dealt to folds whole, as bench/fleet.py deals them, each predicted by "
        "constants fitted on the other folds) and with each model left out of the fit (targets out of sample: "
        "median 12 %, p90 35 %):",
        "",
        "| validation | median error % | p90 error % |",
        "| --- | ---: | ---: |",
        *(f"| {label} | {_pct(e, statistics.median)} | {_pct(e, _p90)} |" for label, e in errors.items()),
        "",
        "| model family | GPUs | rows | median error % | p90 error % | grouped-fold median % | grouped-fold p90 % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (fam, gpus), pairs in sorted(groups.items()):
        f, c = [e for e, _ in pairs], [h for _, h in pairs]
        lines.append(f"| {fam} | {gpus} | {len(pairs)} | {_pct(f, statistics.median)} | {_pct(f, _p90)} | "
                     f"{_pct(c, statistics.median)} | {_pct(c, _p90)} |")  # fmt: skip
    lines += ["", "Per model, with the model left out of the fit:", "",
              "| model | rows | in-sample median % | p90 % | model left out: median % | p90 % |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for model in sorted({p.spec["model"] for p in pts}):
        mine = [i for i, p in enumerate(pts) if p.spec["model"] == model]
        a, b = [fitted[i] for i in mine], [unseen[i] for i in mine]
        lines.append(f"| {model} | {len(mine)} | {_pct(a, statistics.median)} | {_pct(a, _p90)} | "
                     f"{_pct(b, statistics.median)} | {_pct(b, _p90)} |")  # fmt: skip
    found = {
        "THROUGHPUT_BANDS": throughput_bands(pts, held, by_kind=True),
        "THROUGHPUT_UNSEEN_MODEL_BANDS": throughput_bands(pts, unseen, by_kind=False),
    }
    lines += ["", f"What `ftbench predict` and `status.prediction.throughput.accuracy` quote ({GROUPED} for a model the "
              "fleet has, the model left out for one it has not; `ftbench/api/fleet_accuracy.py`):", "",
              "| validation | scope | model kind | rows | median % | p90 % |", "| --- | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for label, name in ((GROUPED, "THROUGHPUT_BANDS"), (MODEL_LEFT_OUT, "THROUGHPUT_UNSEEN_MODEL_BANDS")):
        lines += [f"| {label} | {s} | {k} | {n} | {m:.1f} | {q:.1f} |" for (s, k), (n, m, q) in found[name].items()]
    return "\n".join(lines), found


def _pct(errors: list[float], statistic: Any) -> str:
    return _fmt(100 * (statistic(errors) or 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("fit", "tabulate", "own"):
        p = sub.add_parser(name)
        p.add_argument("--store", type=Path, default=STORE)
        if name in ("tabulate", "own"):
            p.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.cmd == "fit":
        fit(args.store)
    elif args.cmd == "own":
        print(tabulate_own(args.write_docs))
    else:
        print(tabulate(args.store, args.write_docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
