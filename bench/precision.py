"""Measure just long enough: a precision target against a fixed window, side by side (issue 47).

Not a test: run it by hand on an otherwise idle machine and copy the output into docs/benchmarks.md::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/precision.py --runs 16 --json bench/results/precision-2026-11-27.json

One spec (bench/noise.py's: the tiny Llama, LoRA, one CPU rank) runs in fresh trainer processes, two
arms interleaved so drift hits both alike: `fixed` measures `--steps` steps (the first tenth warm-up);
`target` has the same step budget and `targetPrecisionPercent: --target`, so it stops once its
steady tokens/s interval is that tight (after precisionMinSteps 20 and precisionMinSeconds 0: the
steps are ~40 ms). Per arm: the median measured seconds, device-seconds and interval half-width,
and how many target runs stopped early. Then repeats: the target arm's runs taken in order as
`repeats: --max-repeats` with the same target across repeats (ftbench.api.repeats.precise_repeats:
at least 2, stop once the t interval of their mean is within the target), and the same rule on
sequences drawn at random from the runs (seeded, 2000 draws); the share of those stopped groups whose
interval covers the mean of every run of both arms is the coverage. `--from-json` analyses an
earlier `--json` file again without training (tests/unit/test_bench_tables.py does, against
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ftbench.api.repeats import precise_repeats
from ftbench.contracts.results import Metrics, Outcome, TrainerResult
from ftbench.stats.device_time import device_time
from ftbench.stats.intervals import repeats_interval


def _as_result(m: Metrics) -> TrainerResult:
    return TrainerResult(outcome=Outcome.SUCCEEDED, is_valid=True, metrics=m)


def stopped_groups(values: Sequence[Metrics], target: float, most: int) -> list[list[Metrics]]:
    """`values` in order, cut into groups as repeats with a precision target would run them."""
    groups: list[list[Metrics]] = []
    group: list[Metrics] = []
    for m in values:
        group.append(m)
        if len(group) == most or precise_repeats([_as_result(g) for g in group], target):
            groups.append(group)
            group = []
    return groups


def coverage(groups: Sequence[Sequence[Metrics]], grand: float) -> tuple[float, float]:
    """(share of groups whose interval across repeats covers `grand`, mean repeats per group)."""
    if not groups:
        return float("nan"), 0.0
    intervals = [repeats_interval([m.steady_state_tokens_per_second for m in g]) for g in groups]
    covered = sum(1 for i in intervals if i is not None and i.contains(grand))
    return covered / len(groups), statistics.fmean(len(g) for g in groups)


def analyse(fixed: list[Metrics], target: list[Metrics], percent: float, most: int) -> dict[str, Any]:
    grand = statistics.fmean(m.steady_state_tokens_per_second for m in fixed + target)

    def arm(runs: list[Metrics]) -> dict[str, Any]:
        return {
            "runs": len(runs),
            "medianMeasuredSteps": statistics.median(m.measured_steps for m in runs),
            "medianMeasuredSeconds": statistics.median(m.measured_seconds for m in runs),
            "medianDeviceSeconds": statistics.median(device_time(m).total for m in runs),
            "medianHalfWidthPercent": 100 * statistics.median(m.throughput_ci95_relative or 0.0 for m in runs),
            "stoppedByTarget": sum(1 for m in runs if m.stopped_by == "precisionTarget"),
        }

    ordered, ordered_mean = coverage(stopped_groups(target, percent / 100, most), grand)
    rng = random.Random(0)
    drawn = [g for _ in range(2000) for g in stopped_groups(rng.sample(target, len(target)), percent / 100, most)[:1]]
    drawn_coverage, drawn_mean = coverage(drawn, grand)
    return {
        "targetPercent": percent,
        "maxRepeats": most,
        "meanOfAllRuns": grand,
        "fixed": arm(fixed),
        "target": arm(target),
        "measuredSecondsRatio": arm(target)["medianMeasuredSeconds"] / arm(fixed)["medianMeasuredSeconds"],
        "repeatsCoverageInOrder": ordered,
        "repeatsMeanInOrder": ordered_mean,
        "repeatsCoverageDrawn": drawn_coverage,
        "repeatsMeanDrawn": drawn_mean,
    }


def table(summary: dict[str, Any]) -> str:
    """The markdown docs/benchmarks.md shows (tests/unit/test_bench_tables.py keeps them equal)."""
    lines = [
        "| arm | runs | median measured steps | median measured s | median device-s | median ± (within run) "
        "| stopped by the target |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("fixed", "target"):
        a = summary[name]
        lines.append(
            f"| {name} | {a['runs']} | {a['medianMeasuredSteps']:g} | {a['medianMeasuredSeconds']:.2f} "
            f"| {a['medianDeviceSeconds']:.1f} | {a['medianHalfWidthPercent']:.2f}% | {a['stoppedByTarget']} |"
        )
    lines.append("")
    lines.append(
        f"Target ±{summary['targetPercent']:g}%: the target arm measured {summary['measuredSecondsRatio']:.0%} of the "
        f"fixed arm's seconds (medians). Repeats (at most {summary['maxRepeats']}, stopped at the same target across "
        f"repeats): intervals cover the mean of all runs in {summary['repeatsCoverageInOrder']:.0%} of the groups in "
        f"run order ({summary['repeatsMeanInOrder']:.1f} repeats each) and {summary['repeatsCoverageDrawn']:.0%} of "
        f"groups drawn at random ({summary['repeatsMeanDrawn']:.1f} repeats each)."
    )
    return "\n".join(lines)


def main() -> int:
    from noise import SPEC  # the same spec bench/noise.py calibrates the intervals on
    from trainer_run import run_trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16, help="runs per arm")
    parser.add_argument("--steps", type=int, default=320, help="the fixed window, and the target arm's budget")
    parser.add_argument("--target", type=float, default=2.0, help="targetPrecisionPercent")
    parser.add_argument("--max-repeats", type=int, default=5)
    parser.add_argument("--from-json", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.from_json:
        stored = json.loads(args.from_json.read_text())
        fixed = [Metrics.model_validate(m) for m in stored["fixed"]]
        target = [Metrics.model_validate(m) for m in stored["target"]]
        percent, most = stored["summary"]["targetPercent"], stored["summary"]["maxRepeats"]
    else:
        percent, most = args.target, args.max_repeats
        root = Path(tempfile.mkdtemp(prefix="ftbench-precision-bench-"))
        (data := root / "data").mkdir()
        fixed, target = [], []
        warmup = args.steps // 10
        for i in range(args.runs):
            for arm, extra in (
                (fixed, {}),
                (target, {"targetPrecisionPercent": percent, "precisionMinSteps": 20, "precisionMinSeconds": 0}),
            ):
                spec = {**SPEC, "maxSteps": args.steps, "warmupSteps": warmup, **extra}
                m = run_trainer(root, f"precision-{i}-{len(arm)}", spec, data).metrics
                assert m is not None
                arm.append(m)
                print(f"run {i} {'target' if extra else 'fixed'}: {m.measured_steps} steps, "
                      f"±{(m.throughput_ci95_relative or 0):.2%}, {m.stopped_by}", file=sys.stderr)  # fmt: skip
    summary = analyse(fixed, target, percent, most)
    print(table(summary))
    if args.json:
        dump = {"summary": summary, "fixed": [m.model_dump(mode="json", by_alias=True) for m in fixed],
                "target": [m.model_dump(mode="json", by_alias=True) for m in target]}  # fmt: skip
        args.json.write_text(json.dumps(dump, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
