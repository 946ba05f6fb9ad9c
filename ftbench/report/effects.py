"""What each varied field of a sweep did: paired ratios of the headline numbers, with their spread.

Users sweep toggles to ask "does packing (or sdpa, or checkpointing) change tokens/s and memory
for my model?". The answer is the comparison of points that differ in that one field only: every
such pair gives a ratio value / baseline per metric (tokens/s, peak memory), summarised as their
median and range; for the sweep's objective, the pairs whose 95 % intervals do not overlap are
counted, so an effect inside the noise is not claimed.

Design notes: docs/design-notes.md, "ftbench/report/effects.py".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ftbench.api.sweep import PointRow
from ftbench.report.data import SweepData

MEASURED = ("Succeeded", "Reused")
PEAK_MEMORY = "peakMemory"


@dataclass(frozen=True)
class Effect:
    field: str
    baseline: Any
    value: Any
    metric: str
    ratios: tuple[float, ...]
    # Pairs whose objective intervals do not overlap, of those where both points have one; None
    # when the metric is not the objective or no pair has intervals.
    beyond_noise: tuple[int, int] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)


def _peak_memory(sweep: SweepData) -> dict[int, float]:
    """Per point: the mean over its measured repeats of the peak memory of its device."""
    by_point: dict[int, list[float]] = {}
    for run in sweep.runs:
        if run.point is None or run.metrics is None or run.phase not in MEASURED:
            continue
        m = run.metrics
        by_point.setdefault(run.point, []).append(float(m.gpu_max_memory_allocated_bytes or m.cpu_peak_rss_bytes))
    return {p: statistics.fmean(v) for p, v in by_point.items() if any(v)}


def _metrics(sweep: SweepData) -> dict[str, Callable[[PointRow], float | None]]:
    peaks = _peak_memory(sweep)
    return {
        "trainTokensPerSecond": lambda r: r.train_tokens_per_second,
        "datasetTokensPerSecond": lambda r: r.dataset_tokens_per_second,
        PEAK_MEMORY: lambda r: peaks.get(r.point),
    }


def _key(row: PointRow, field: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in row.values.items() if k != field))


def _separated(a: PointRow, b: PointRow) -> bool | None:
    lows, highs = (a.objective_ci95_low, b.objective_ci95_low), (a.objective_ci95_high, b.objective_ci95_high)
    if None in lows or None in highs:
        return None
    return bool(a.objective_ci95_high < b.objective_ci95_low or b.objective_ci95_high < a.objective_ci95_low)  # type: ignore[operator]


def toggle_effects(sweep: SweepData) -> list[Effect]:
    """Every varied field's effect on each metric (fields with a single value, or no measured
    pair, give none)."""
    rows = [r for r in sweep.rows if r.phase in MEASURED]
    fields = list(dict.fromkeys(k for r in sweep.rows for k in r.values))
    effects: list[Effect] = []
    for field in fields:
        values = list(dict.fromkeys(repr(r.values.get(field)) for r in sweep.rows if field in r.values))
        if len(values) < 2:
            continue
        baselines = {_key(r, field): r for r in rows if repr(r.values.get(field)) == values[0]}
        for value in values[1:]:
            pairs = [(baselines[k], r) for r in rows if repr(r.values.get(field)) == value and (k := _key(r, field)) in baselines]  # fmt: skip
            if not pairs:
                continue
            for metric, read in _metrics(sweep).items():
                ratios = [v / b for base, row in pairs if (b := read(base)) and (v := read(row)) is not None]
                if not ratios:
                    continue
                beyond = None
                if metric == sweep.objective:
                    separated = [s for base, row in pairs if (s := _separated(base, row)) is not None]
                    beyond = (sum(separated), len(separated)) if separated else None
                effects.append(Effect(field, pairs[0][0].values[field], pairs[0][1].values[field], metric,
                                      tuple(ratios), beyond))  # fmt: skip
    return effects


def effect_rows(effects: Sequence[Effect]) -> tuple[tuple[str, ...], ...]:
    """The report table's rows: field, change, metric, pairs, median ratio, range, beyond noise."""
    out = []
    for e in effects:
        low, high = min(e.ratios), max(e.ratios)
        noise = "" if e.beyond_noise is None else f"{e.beyond_noise[0]} of {e.beyond_noise[1]}"
        out.append((e.field, f"{e.baseline} -> {e.value}", e.metric, str(len(e.ratios)), f"{e.median:.2f}x",
                    f"{low:.2f}x to {high:.2f}x", noise))  # fmt: skip
    return tuple(out)
