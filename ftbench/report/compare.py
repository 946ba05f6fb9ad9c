"""Two runs side by side: what differs in their specs, and each headline metric with B/A - 1.

Before/after questions ("did the new release, the other dtype, the bigger batch help?") compare two
runs of the local store; the spec rows show what changed so a difference is not read against the
wrong cause. A run with several results (the stability experiment's trials) counts as their mean.
Metrics with a 95 % interval (one run's batch means, or the spread of several results) say whether
the difference is beyond the noise: "within noise" when the two intervals overlap (ftbench.stats).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ftbench.contracts.results import Metrics, TrainerResult
from ftbench.local.store import RunRecord
from ftbench.stats.intervals import Interval, repeats_interval, separated
from ftbench.stats.text import REPEAT_TO_CONFIRM

# The metrics shown (wire names): throughput, time per step, utilization, memory, then the run's size.
HEADLINE_METRICS = (
    "trainTokensPerSecond",
    "trainTokensPerGpuPerSecond",
    "datasetTokensPerSecond",
    "steadyStateTokensPerSecond",
    "stepTimeMeanSeconds",
    "trainSamplesPerSecond",
    "stepTimeP50Seconds",
    "stepTimeP95Seconds",
    "stepTimeCv",
    "mfuPercent",
    "gpuComputeUtilizationAvgPercent",
    "gpuMemoryUtilizationPeakPercent",
    "gpuMaxMemoryAllocatedBytes",
    "gpuPowerAvgWatts",
    "cpuMemoryUtilizationPercent",
    "trainRuntimeSeconds",
    "trainSteps",
)


# Metrics with an interval of their own: (estimate, low, high) field names.
INTERVALS: dict[str, tuple[str, str, str]] = {
    "steadyStateTokensPerSecond": (
        "steady_state_tokens_per_second",
        "steady_state_tokens_per_second_ci95_low",
        "steady_state_tokens_per_second_ci95_high",
    ),
    "stepTimeMeanSeconds": (
        "step_time_mean_seconds",
        "step_time_mean_ci95_low_seconds",
        "step_time_mean_ci95_high_seconds",
    ),
}
WITHIN_NOISE, BEYOND_NOISE, NO_INTERVAL = "within noise", "beyond noise", "no interval"
# One run's interval sees its step-to-step noise only; differences between processes (bench/noise.py
# measures them) need repeats, so a separation of single runs is said with that caveat.
BEYOND_RUN_NOISE = f"beyond one run's noise ({REPEAT_TO_CONFIRM})"


class RunLookupError(LookupError):
    """A run key that names no run, or several (the CLI prints it as a usage error)."""


def find_run(runs: Sequence[RunRecord], key: str) -> RunRecord:
    """The run with id `key`, else the one id starting with it, else the one run named `key`."""
    if exact := [r for r in runs if r.id == key]:
        return exact[0]
    for matches, what in (([r for r in runs if r.id.startswith(key)], "run ids starting with"),
                          ([r for r in runs if r.name == key], "runs named")):  # fmt: skip
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(r.id for r in matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise RunLookupError(f"{len(matches)} {what} {key!r}: {ids}; give a run id")
    raise RunLookupError(f"no run {key!r}: `ftbench results` lists the run ids")


def mean_metrics(run: RunRecord) -> tuple[dict[str, float], int]:
    """The mean of each numeric metric over the run's results with metrics, and how many there were."""
    found = [r.metrics.model_dump(by_alias=True) for r in map(TrainerResult.model_validate, run.results) if r.metrics]
    numeric = {k for m in found for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {k: statistics.fmean(float(m[k]) for m in found) for k in numeric}, len(found)


def _measured(run: RunRecord) -> list[Metrics]:
    return [r.metrics for r in map(TrainerResult.model_validate, run.results) if r.metrics]


def run_interval(run: RunRecord, metric: str) -> Interval | None:
    """The 95 % interval of `metric` for a run: its own batch-means interval, or with several results
    the t interval of their mean (each result a fresh process, so independent)."""
    estimate, low, high = INTERVALS[metric]
    found = _measured(run)
    if len(found) > 1:
        return repeats_interval([getattr(m, estimate) for m in found])
    if not found or getattr(found[0], low) is None or getattr(found[0], high) is None:
        return None
    m = found[0]
    return Interval(getattr(m, estimate), getattr(m, low), getattr(m, high))


def verdict(a: Interval | None, b: Interval | None, repeated: bool = True) -> str:
    """within noise / beyond noise (of single runs when not `repeated`), or no interval where a run has none."""
    if a is None or b is None:
        return NO_INTERVAL
    if not separated(a, b):
        return WITHIN_NOISE
    return BEYOND_NOISE if repeated else BEYOND_RUN_NOISE


def _with_interval(value: float | None, interval: Interval | None) -> str:
    if value is None or interval is None:
        return _fmt(value)
    return f"{_fmt(value)}±{interval.relative_half_width:.1%}"


def _flags(run: RunRecord) -> str:
    return ",".join(sorted({f.value for m in _measured(run) for f in m.noise_flags})) or "clean"


def _flat(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def relative(a: float | None, b: float | None) -> str:
    """B/A - 1 as a signed percentage; empty where it means nothing (a missing value, A = 0)."""
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a - 1:+.1%}"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


@dataclass(frozen=True)
class Comparison:
    rows: tuple[tuple[str, str, str, str, str], ...]  # (what, A, B, B/A - 1, noise verdict)


def compare(a: RunRecord, b: RunRecord) -> Comparison:
    """Identity rows, the spec fields that differ, then every headline metric either run has."""
    (ma, na), (mb, nb) = mean_metrics(a), mean_metrics(b)
    rows: list[tuple[str, str, str, str, str]] = [
        ("run", a.id, b.id, "", ""),
        ("name", a.name, b.name, "", ""),
        ("status", a.status, b.status, "", ""),
    ]
    if na > 1 or nb > 1:
        rows.append(("results averaged", str(na), str(nb), "", ""))
    sa, sb = _flat(a.spec), _flat(b.spec)
    rows += [(f"spec.{k}", _fmt(sa.get(k)), _fmt(sb.get(k)), "", "") for k in sorted(sa.keys() | sb.keys())
             if sa.get(k) != sb.get(k)]  # fmt: skip
    for metric in HEADLINE_METRICS:
        va, vb = ma.get(metric), mb.get(metric)
        if va is None and vb is None:
            continue
        if metric in INTERVALS:
            ia, ib = run_interval(a, metric), run_interval(b, metric)
            repeated = na > 1 and nb > 1
            rows.append((metric, _with_interval(va, ia), _with_interval(vb, ib), relative(va, vb),
                         verdict(ia, ib, repeated)))  # fmt: skip
        else:
            rows.append((metric, _fmt(va), _fmt(vb), relative(va, vb), ""))
    if na or nb:
        rows.append(("noiseFlags", _flags(a), _flags(b), "", ""))
    return Comparison(tuple(rows))
