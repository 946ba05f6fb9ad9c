"""Calibration of ftbench's intervals: one spec run many times, each run's 95 % interval against all.

Not a test: run it by hand on an otherwise idle machine and copy the output into docs/benchmarks.md::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/noise.py --runs 12 --steps 80

Each run is `ftbench-trainer` in a fresh process (as a pod or a repeat runs it) on the tiny Llama with
the same spec, data and seed. The figure is `steadyStateTokensPerSecond` with its batch-means 95 %
interval (docs/measurements.md "How sure a number is"). Coverage is the share of runs whose interval
contains the mean over all runs: a within-run interval only sees step-to-step noise, so coverage
below ~90 % says that run-to-run differences (process start, memory placement, the host) matter
beyond it, which is what `repeats` measure. The runs are then taken `--group` at a time as repeats (as
`repeats: k` runs them): the share of groups whose t interval across its repeats contains the mean is
the calibration of the repeats' interval; groups drawn at random from all runs (seeded, 2000 draws)
separate that calibration from drift between consecutive runs. `--from-json` analyses the runs of an
earlier `--json` file again without training. Also reported: the CV across runs, each run's CV of step
times and relative half-width, the noise flags raised, and the t interval of the mean over all runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from trainer_run import run_trainer

from ftbench.contracts.results import Metrics
from ftbench.stats.intervals import repeats_interval

SPEC: dict[str, Any] = {
    "experiment": "finetune_lora_benchmark-v1.0.0",
    "engine": "trl",
    "model": "ftbench-tiny-llama",
    "datasetId": "news-chars-512-entries-4096",
    "modelMaxLength": 512,
    "numberGpus": 0,
    "batchSize": 4,
    "gradientAccumulationSteps": 1,
    "gradientCheckpointing": False,
    "torchDtype": "float32",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--group", type=int, default=3, help="runs per group of repeats (default 3)")
    parser.add_argument("--from-json", type=Path, help="analyse the runs of an earlier --json file, train nothing")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    runs = [Metrics.model_validate(r) for r in json.loads(args.from_json.read_text())["runs"]] if args.from_json else []
    root = Path(tempfile.mkdtemp(prefix="ftbench-noise-bench-"))
    data = root / "data"
    data.mkdir()
    for i in range(0 if args.from_json else args.runs):
        result = run_trainer(root, f"noise-{i}", {**SPEC, "maxSteps": args.steps}, data)
        m = result.metrics
        assert m is not None and m.steady_state_tokens_per_second_ci95_low is not None
        runs.append(m)
        print(f"run {i}: {m.steady_state_tokens_per_second:,.0f} tokens/s ±{m.throughput_ci95_relative:.1%}",
              file=sys.stderr)  # fmt: skip
    values = [m.steady_state_tokens_per_second for m in runs]
    grand = statistics.fmean(values)
    covered = [m for m in runs if (m.steady_state_tokens_per_second_ci95_low or 0) <= grand
               <= (m.steady_state_tokens_per_second_ci95_high or 0)]  # fmt: skip
    across = repeats_interval(values)
    assert across is not None
    flags = Counter(f.value for m in runs for f in m.noise_flags)
    groups = [values[i : i + args.group] for i in range(0, len(values) - args.group + 1, args.group)]
    group_intervals = [g for g in map(repeats_interval, groups) if g is not None]
    group_covered = sum(g.contains(grand) for g in group_intervals)
    rng = random.Random(0)
    drawn = [repeats_interval(rng.sample(values, args.group)) for _ in range(2000)]
    random_coverage = sum(1 for g in drawn if g is not None and g.contains(grand)) / len(drawn)
    summary = {
        "runs": len(runs),
        "measuredSteps": runs[0].measured_steps,
        "meanTokensPerSecond": grand,
        "cvAcrossRuns": statistics.stdev(values) / grand,
        "coverage": len(covered) / len(runs),
        "medianRelativeHalfWidth": statistics.median(m.throughput_ci95_relative or 0.0 for m in runs),
        "medianStepTimeCv": statistics.median(m.step_time_cv for m in runs),
        "meanCi95": [across.low, across.high],
        "flags": dict(flags),
        "groupsOfRepeats": len(group_intervals),
        "randomGroupsCoverage": random_coverage,
        "repeatsCoverage": group_covered / len(group_intervals) if group_intervals else None,
        "medianRepeatsRelativeHalfWidth": (
            statistics.median(g.relative_half_width for g in group_intervals) if group_intervals else None
        ),
    }
    print("| runs | measured steps | mean tokens/s (95% CI over runs) | CV across runs | median ± per run "
          "| coverage of the mean | median step-time CV | noise flags |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {summary['runs']} | {summary['measuredSteps']} | {grand:,.0f} ({across.low:,.0f}-{across.high:,.0f}) "
        f"| {summary['cvAcrossRuns']:.1%} | {summary['medianRelativeHalfWidth']:.1%} | "
        f"{len(covered)}/{len(runs)} ({summary['coverage']:.0%}) | {summary['medianStepTimeCv']:.1%} "
        f"| {', '.join(f'{k} x{v}' for k, v in sorted(flags.items())) or 'none'} |"
    )
    if group_intervals:
        print(
            f"\nRepeats of {args.group}: {group_covered}/{len(group_intervals)} groups' 95% intervals cover the mean "
            f"of all runs (median ±{summary['medianRepeatsRelativeHalfWidth']:.1%}); groups drawn at random: "
            f"{random_coverage:.0%}."
        )
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "runs": [m.model_dump(mode="json", by_alias=True) for m in runs]}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
