"""Replay the prediction-guided search (ftbench.sweep.search) on ado's fleet: a trial returns what ado measured.

    .venv/bin/python bench/search_replay.py [--sample CSV] [--fraction 0.25] [--write-docs]

A space is one model and method (full or LoRA) of the sample with at least --min-points configurations that ran;
its points are those configurations (repeats of one configuration are one point, at their mean), every other
field free: GPUs, nodes, batch, sequence, release, fastMoe. The objective is tokens/s per GPU (ado's
dataset_tokens_per_second / numberGpus). Predictions are out of sample: the throughput constants are fitted with
the space's model left out (bench/fleet_throughput.fit_points), and each point's band is the model-left-out 90th
percentile of its scope (ftbench.predict.fleet_accuracy). The search measures at most --fraction of a space's points;
beside it, random search at the same budget (the chance, over every subset of that size, that the best of it is
within 5 % of the space's best) and exhaustive search (every point). The last line: "N of M spaces within 5 % of
the best measured, K % of points measured". --sample takes any fleet sample (CSV) or a store bench/fleet.py wrote.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from fleet_throughput import points, points_of, publish, sample_rows

from ftbench.predict.constants import THROUGHPUT_UNSEEN_MODEL_BANDS
from ftbench.predict.fit_throughput import Point, fit_points
from ftbench.predict.fleet_accuracy import ANY_KIND, scope
from ftbench.sweep.search import Candidate, Trial, best_trial, budget_of, next_step

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "bench" / "results" / "fleet-sample-A.json"
SECTION = "search-replay"
WITHIN = 0.05
PER_GPU, TOTAL = "per-gpu", "total"
OBJECTIVES = {PER_GPU: "tokens/s per GPU", TOTAL: "tokens/s"}
KNOBS = ("numberGpus", "numberNodes", "batchSize", "modelMaxLength", "fmsHfTuningVersion", "fastMoe")


def method(spec: dict[str, Any]) -> str:
    return "lora" if "lora" in spec["experiment"] else "full"


def spaces(pts: list[Point], min_points: int) -> dict[tuple[str, str], list[list[Point]]]:
    """(model, method) -> its configurations, each the rows that repeat it."""
    grouped: dict[tuple[str, str], dict[tuple[Any, ...], list[Point]]] = defaultdict(lambda: defaultdict(list))
    for p in pts:
        config = tuple(sorted((k, str(v)) for k, v in p.spec.items()))
        grouped[(p.spec["model"], method(p.spec))][config].append(p)
    return {k: list(v.values()) for k, v in sorted(grouped.items()) if len(v) >= min_points}


def candidates(configs: list[list[Point]], constants: Any, objective: str) -> tuple[list[Candidate], dict[str, float]]:
    """The space's points as the search sees them, and what a trial of each returns (measured tokens/s per GPU,
    or in all: the shortest time to a token budget on at most the space's GPUs)."""
    out, truth = [], {}
    for i, rows in enumerate(configs):
        p = rows[0]
        per = p.gpus if objective == PER_GPU else 1
        predicted = p.model.step_tokens / p.model.seconds(constants).step / per
        band = THROUGHPUT_UNSEEN_MODEL_BANDS[(scope(p.gpus, p.nodes), ANY_KIND)][2] / 100
        key = f"{i}"
        out.append(Candidate(key, {k: p.spec.get(k) for k in KNOBS}, predicted, band))
        truth[key] = mean(r.measured for r in rows) / per
    return out, truth


def search(cands: list[Candidate], truth: dict[str, float], budget: int) -> list[Trial]:
    trials: list[Trial] = []
    while (step := next_step(cands, trials, budget)).candidate is not None:
        trials.append(Trial(step.candidate.key, truth[step.candidate.key]))
    return trials


def random_within(values: list[float], k: int) -> float:
    """The chance that the best of k points drawn at random is within WITHIN of the best: exact, over all subsets."""
    good = sum(1 for v in values if v >= (1 - WITHIN) * max(values))
    n = len(values)
    return 1 - math.comb(n - good, k) / math.comb(n, k)


def replay(source: Path, fraction: float, min_points: int, objective: str) -> str:
    """`source`: a bench/fleet.py store (JSON) or a fleet sample (CSV)."""
    pts = points_of(sample_rows(source)) if source.suffix == ".csv" else points(source)
    rows, found, measured_points, all_points, random_expected = [], 0, 0, 0, 0.0
    for (model, how), configs in spaces(pts, min_points).items():
        constants = fit_points([p for p in pts if p.spec["model"] != model])  # the model left out
        cands, truth = candidates(configs, constants, objective)
        budget = budget_of(len(cands), fraction)
        trials = search(cands, truth, budget)
        best = max(truth.values())
        got = best_trial(trials)
        value = got.measured if got and got.measured is not None else 0.0
        ok = value >= (1 - WITHIN) * best
        chance = random_within(list(truth.values()), len(trials))
        found += ok
        random_expected += chance
        measured_points += len(trials)
        all_points += len(cands)
        rows.append(
            f"| {model} | {how} | {len(cands)} | {len(trials)} | {best:,.0f} | {value:,.0f} "
            f"({100 * value / best:.0f} %) | {'yes' if ok else 'no'} | {100 * chance:.0f} % |"
        )
    head = (
        f"| model | method | points | measured | best {OBJECTIVES[objective]} | found | within 5 % | random, same budget |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    summary = (
        f"\n\nRandom search at the same budget finds a point within 5 % in {random_expected:.1f} of {len(rows)} spaces "
        f"(expected); exhaustive search in all {len(rows)}, measuring every point.\n\n"
        f"{found} of {len(rows)} spaces within 5 % of the best measured, "
        f"{100 * measured_points / max(1, all_points):.0f} % of points measured"
    )
    return head + "\n" + "\n".join(rows) + summary


def report(
    store: Path = STORE, fraction: float = 0.25, min_points: int = 8, objectives: Any = tuple(OBJECTIVES)
) -> str:
    """The tables of docs/benchmarks.md's search-replay section (one per objective)."""
    return "\n\n".join(f"Objective: {OBJECTIVES[o]}.\n\n{replay(store, fraction, min_points, o)}" for o in objectives)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, default=STORE,
                        help="a fleet sample (CSV, as ../shared/data/ado-fleet holds) or a bench/fleet.py store (JSON; "
                        "default: sample A's)")  # fmt: skip
    parser.add_argument("--fraction", type=float, default=0.25, help="share of a space's points measured at most")
    parser.add_argument("--min-points", type=int, default=8, help="smallest space replayed (default 8)")
    parser.add_argument("--objective", choices=(*OBJECTIVES, "both"), default="both",
                        help="tokens/s per GPU (fewest GPU-hours for a token budget), tokens/s in all (shortest time on "
                        "at most the space's GPUs), or both tables (default)")  # fmt: skip
    parser.add_argument("--write-docs", action="store_true", help="also into docs/benchmarks.md")
    args = parser.parse_args()
    chosen = list(OBJECTIVES) if args.objective == "both" else [args.objective]
    body = report(args.sample, args.fraction, args.min_points, chosen)
    publish(SECTION, body, args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
