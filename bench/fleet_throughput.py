"""ftbench's throughput prediction held against ado's fleet: steady tokens/s of real A100 runs.

    .venv/bin/python bench/fleet_throughput.py fit                      # the efficiency's coefficients
    .venv/bin/python bench/fleet_throughput.py tabulate --write-docs    # the table in docs/benchmarks.md

Reads the rows `bench/fleet.py predict` stored (bench/results/fleet-sample-A.json: the spec of every clean
row and what ado measured) and predicts each row that ran with `ftbench.predict.throughput` (pure arithmetic:
no trace, no environment), against ado's `dataset_tokens_per_second` (every sample of these datasets fills
the sequence length, so it is the padded tokens/s ftbench predicts).

`fit` finds the model's constants (ftbench.predict.constants.FITTED; ftbench.predict.fit_throughput) together: Levenberg-Marquardt on log
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
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import DOCS, STORE, _fmt, clean, family, write_generated

from ftbench.predict.constants import FITTED
from ftbench.predict.fit_folds import p90_or_none as _p90
from ftbench.predict.fit_throughput import OwnRun, Point, fitted, throughput_bands
from ftbench.predict.fit_throughput import validated as errors_of
from ftbench.predict.fleet_accuracy import GROUPED, MODEL_LEFT_OUT

SECTION = "fleet-throughput"


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
    from ftbench.api.validation import validate_spec_dict
    from ftbench.catalog import load_catalog
    from ftbench.predict.throughput import step_model

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


def fit(store: Path) -> Any:
    """FITTED as the fleet gives it (ftbench.predict.fit_throughput), printed."""
    found = fitted(points(store), own_runs())
    print(found)
    return found


# ftbench's own runs on lent GPUs: the results stores bench/gpu/ brought back (bench/results/*/README.md)
OWN_STORES = (
    ("H100, trl", "gpu-h100-2026-11-26/call1/trl/results.db"),
    ("H100, fms-hf-tuning 3.2.2", "gpu-h100-2026-11-26/call2/fms-hf-tuning/results.db"),
    ("H200, trl", "gpu-h200-2026-11-26/results.db"),
)
OWN_SECTION = "own-gpu-throughput"


def own_runs() -> list[OwnRun]:
    """Every successful run of OWN_STORES with a steady tokens/s (each store read from a copy: opening one
    may add tables)."""
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.catalog import load_catalog
    from ftbench.local.store import ResultsStore
    from ftbench.predict.throughput import step_model

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


def tabulate_own(write_docs: bool) -> str:

    groups: dict[tuple[str, str], list[OwnRun]] = defaultdict(list)
    for run in own_runs():
        groups[(run.store, run.experiment)].append(run)
    a100 = dataclasses.replace(FITTED, gpu_efficiency={})
    lines = [
        "| GPU, engine | experiment | runs | measured steady tokens/s | predicted, A100 calibration | error % | "
        "predicted | error % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (store, experiment), runs in sorted(groups.items()):
        measured = statistics.fmean(r.measured for r in runs)
        model = runs[0].model
        cells = []
        for constants in (a100, FITTED):
            predicted = model.step_tokens / model.seconds(constants).step
            cells += [f"{predicted:,.0f}", f"{100 * (predicted - measured) / measured:+.1f}"]
        lines.append(f"| {store} | {experiment.removeprefix('finetune_')} | {len(runs)} | {measured:,.0f} | "
                     f"{' | '.join(cells)} |")  # fmt: skip
    shares = ", ".join(f"{k} {v}" for k, v in FITTED.gpu_efficiency.items())
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


def validated(store: Path) -> tuple[list[Point], dict[str, list[float]]]:
    """The rows, and each row's error in sample, under grouped folds and with its model left out."""
    pts = points(store)
    return pts, errors_of(pts)


def tabulate(store: Path, write_docs: bool) -> str:
    body, found = report(*validated(store))
    if write_docs:
        _write_section(SECTION, body)
        write_generated("throughput-accuracy", found)
    return body


def report(pts: list[Point], errors: dict[str, list[float]]) -> tuple[str, dict[str, Any]]:
    """The docs section and the bands it states (ftbench.predict.fleet_accuracy's THROUGHPUT_*)."""
    fitted, held, unseen = errors["in sample"], errors[GROUPED], errors[MODEL_LEFT_OUT]
    groups: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for p, e, h in zip(pts, fitted, held, strict=True):
        groups[(family(p.spec), p.gpus)].append((e, h))
    lines = [
        f"{len(pts)} clean rows that ran, each predicted (`ftbench.predict.throughput`, pure arithmetic); |predicted - "
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
    lines += ["", *tail_table(pts, held)]
    found = {
        "THROUGHPUT_BANDS": throughput_bands(pts, held, by_kind=True),
        "THROUGHPUT_UNSEEN_MODEL_BANDS": throughput_bands(pts, unseen, by_kind=False),
    }
    lines += ["", f"What `ftbench predict` and `status.prediction.throughput.accuracy` quote ({GROUPED} for a model the "
              "fleet has, the model left out for one it has not; `ftbench/predict/constants.py`):", "",
              "| validation | scope | model kind | rows | median % | p90 % |", "| --- | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for label, name in ((GROUPED, "THROUGHPUT_BANDS"), (MODEL_LEFT_OUT, "THROUGHPUT_UNSEEN_MODEL_BANDS")):
        lines += [f"| {label} | {s} | {k} | {n} | {m:.1f} | {q:.1f} |" for (s, k), (n, m, q) in found[name].items()]
    return "\n".join(lines), found


TAIL = 0.35  # issue 60's p90 target: the rows beyond it are listed, with what the table itself says of them


def tail_table(pts: list[Point], held: list[float]) -> list[str]:
    """The rows whose grouped-fold error is beyond TAIL, worst first: the setup, measured against predicted, and the
    other runs of the same configuration (every field equal, batch and sequence included) where ado ran it again."""
    from ftbench.predict.constants import FITTED

    same: dict[str, list[float]] = defaultdict(list)
    for p in pts:
        same[json.dumps(p.spec, sort_keys=True)].append(p.measured)
    rows = sorted(((e, p) for p, e in zip(pts, held, strict=True) if e > TAIL), key=lambda t: -t[0])
    out = [f"The {len(rows)} rows beyond {100 * TAIL:.0f} % under {GROUPED} (line of fleet-sample-A.csv; fastMoe is the "
           "expert-parallel degree; repeats: ado's other runs of the identical configuration):", "",
           "| line | model | method | GPUs / nodes | batch x length | release | fast kernels | fastMoe | RoCE | "
           "measured tokens/s | predicted / measured | grouped-fold error % | repeats (tokens/s) |",
           "| ---: | --- | --- | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | --- |"]  # fmt: skip
    for e, p in rows:
        sp = p.spec
        ratio = p.model.step_tokens / p.model.seconds(FITTED).step / p.measured
        others = list(same[json.dumps(sp, sort_keys=True)])
        others.remove(p.measured)
        out.append(
            f"| {p.line} | {sp['model']} | {sp['experiment'].split('_')[1]} | {p.gpus} / {p.nodes} | "
            f"{sp['batchSize']} x {sp['modelMaxLength']} | {sp.get('fmsHfTuningVersion', '')} | "
            f"{'yes' if any(sp.get('fastKernels') or []) else 'no'} | {sp.get('fastMoe') or 0} | {'yes' if sp.get('enableRoce') else 'no'} | {p.measured:,.0f} | "
            f"{ratio:.2f} | {100 * e:.1f} | {', '.join(f'{m:,.0f}' for m in others) or '-'} |"
        )
    return out


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
