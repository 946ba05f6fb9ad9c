"""ftbench's throughput prediction held against ado's fleet: steady tokens/s of real A100 runs.

    .venv/bin/python bench/fleet_throughput.py fit                      # the efficiency's coefficients
    .venv/bin/python bench/fleet_throughput.py tabulate --write-docs    # the table in docs/benchmarks.md

Reads the rows `bench/fleet.py predict` stored (bench/results/fleet-sample-A.json: the spec of every clean
row and what ado measured) and predicts each row that ran with `ftbench.api.throughput` (pure arithmetic:
no trace, no environment), against ado's `dataset_tokens_per_second` (every sample of these datasets fills
the sequence length, so it is the padded tokens/s ftbench predicts).

`fit` finds the efficiency model's coefficients (ftbench.api.throughput.EFFICIENCY) by Huber-weighted least
squares of log MFU on the single-node rows (what each step reached: hardware FLOPs over the step time and
the peak), then the inter-node bandwidths and overlap by a grid over the 2- and 4-node rows' median error.
Calibrate on sample A only: a disjoint sample of ado's table is kept aside to check the result.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import DOCS, STORE, _fmt, _p90, clean, family

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
    from ftbench.api.throughput import step_model
    from ftbench.api.validation import validate_spec_dict
    from ftbench.catalog import load_catalog

    catalog, out = load_catalog(), []
    for row in json.loads(store.read_text())["rows"]:
        tps = row["measured"].get("dataset_tokens_per_second")
        if not row["isValid"] or not tps or not clean(row["spec"]):
            continue
        report = validate_spec_dict(row["spec"], catalog)
        model = step_model(report.spec, catalog) if report.spec is not None else None
        if model is not None:
            out.append(Point(row["line"], row["spec"], float(tps), model))
    return out


def fit(store: Path) -> tuple[dict[str, float], tuple[float, float, float]]:
    """The efficiency's coefficients, and (RDMA bytes/s, TCP bytes/s, overlap) across nodes."""
    import numpy as np

    from ftbench.api import throughput as tp

    pts = points(store)
    single = [p for p in pts if p.nodes == 1]
    names = list(tp.EFFICIENCY)
    x = np.array([[p.model.features[k] for k in names] for p in single])
    # The efficiency each step reached: hardware FLOPs per device over the step time and the peak.
    y = np.array([math.log(p.model.hardware_flops * p.measured / p.model.step_tokens / p.model.peak) for p in single])
    weights = np.ones(len(y))
    for _ in range(50):  # Huber: rows farther than 0.25 in log from the fit weigh less
        coef, *_ = np.linalg.lstsq(x * np.sqrt(weights)[:, None], y * np.sqrt(weights), rcond=None)
        residual = np.abs(x @ coef - y)
        weights = np.where(residual < 0.25, 1.0, 0.25 / np.maximum(residual, 1e-9))
    print(f"{len(single)} single-node rows; median |log residual| {np.median(residual):.3f}")
    coefficients = dict(zip(names, (round(float(c), 3) for c in coef), strict=True))
    for name, c in coefficients.items():
        print(f"{name}: {c:+.3f}")
    multi = [p for p in pts if p.nodes > 1]
    best: tuple[float, float, float, float] | None = None
    for rdma in (5e9, 1e10, 2e10, 4e10, 8e10, 1.6e11):
        for tcp in (1e9, 2e9, 4e9, 8e9, 1.6e10, 3.2e10):
            for overlap in (0.0, 0.5, 0.8, 1.0):
                err = statistics.median(p.error(_predict(p, coefficients, rdma, tcp, overlap)) for p in multi)
                if best is None or err < best[0]:
                    best = (err, rdma, tcp, overlap)
    assert best is not None
    print(f"{len(multi)} multi-node rows; median error {best[0]:.3f} at RDMA {best[1]:.3g} B/s, TCP {best[2]:.3g} "
          f"B/s, overlap {best[3]}")  # fmt: skip
    return coefficients, best[1:]


def _predict(p: Point, coefficients: dict[str, float], rdma: float, tcp: float, overlap: float) -> float:
    """A point's tokens/s with other inter-node constants than ftbench's (the grid of `fit`)."""
    from ftbench.api import throughput as tp

    compute = p.model.hardware_flops / (p.model.peak * tp.efficiency(p.model.features, coefficients))
    used = tp.INTER_NODE_RDMA_BYTES if p.spec.get("enableRoce") else tp.INTER_NODE_TCP_BYTES
    communication = p.model.communication * used / (rdma if p.spec.get("enableRoce") else tcp)
    return p.model.step_tokens / (compute + max(0.0, communication - overlap * compute))


def tabulate(store: Path, write_docs: bool) -> str:
    pts = points(store)
    predicted = {p.line: p.model.predict(p.gpus).tokens_per_second_estimate for p in pts}
    errors = [p.error(predicted[p.line]) for p in pts]
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for p, e in zip(pts, errors, strict=True):
        groups[(family(p.spec), p.gpus)].append(e)
    lines = [
        f"{len(pts)} clean rows that ran, each predicted (`ftbench.api.throughput`, pure arithmetic); |predicted - "
        f"measured| / measured steady tokens/s: median {_fmt(100 * statistics.median(errors))} %, 90th percentile "
        f"{_fmt(100 * (_p90(errors) or 0))} % (targets: 15 % and 35 %).",
        "",
        "| model family | GPUs | rows | median error % | p90 error % |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for (fam, gpus), errs in sorted(groups.items()):
        lines.append(f"| {fam} | {gpus} | {len(errs)} | {_fmt(100 * statistics.median(errs))} | "
                     f"{_fmt(100 * (_p90(errs) or 0))} |")  # fmt: skip
    body = "\n".join(lines)
    if write_docs:
        start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
        head, rest = DOCS.read_text().split(start, 1)
        _, tail = rest.split(end, 1)
        DOCS.write_text(f"{head}{start}\n{body}\n{end}{tail}")
    return body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("fit", "tabulate"):
        p = sub.add_parser(name)
        p.add_argument("--store", type=Path, default=STORE)
        if name == "tabulate":
            p.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.cmd == "fit":
        fit(args.store)
    else:
        print(tabulate(args.store, args.write_docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
