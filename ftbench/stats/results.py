"""Intervals of result metrics over one configuration's runs (a sweep point, a spec's repeats)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ftbench.contracts.quality import IntervalScope, MeasurementQuality, NoiseFlag
from ftbench.contracts.results import Metrics
from ftbench.stats.intervals import Interval, repeats_interval


def applicable(values: Iterable[float | None]) -> list[float]:
    """The figures that apply (GPU figures of GPU runs, MFU where the GPU's peak is known): a figure
    that does not apply is absent (None), never averaged in as a 0."""
    return [float(v) for v in values if v is not None]


def field_name(metric: str) -> str:
    """The Metrics field of a wire name (`trainTokensPerSecond` -> `train_tokens_per_second`)."""
    return next((n for n, f in Metrics.model_fields.items() if (f.alias or n) == metric), metric)


def metric_interval(metrics: Sequence[Metrics], metric: str) -> Interval | None:
    """The 95 % interval of `metric` (a wire name) over runs of one configuration: the t interval
    across them (fresh processes, so independent) with two or more; with one, the run's own
    throughputCi95Relative where the metric is a per-second rate or MFU (they scale with the step
    time); None where nothing says how sure the number is."""
    name = field_name(metric)
    values = applicable(getattr(m, name) for m in metrics)
    if len(values) > 1:
        return repeats_interval(values)
    rel = metrics[0].throughput_ci95_relative if metrics else None
    if rel is None or not values or not (name.endswith("_per_second") or name == "mfu_percent"):
        return None
    return Interval(values[0], values[0] * (1 - rel), values[0] * (1 + rel), 1)


def steady_interval_fields(steady: Interval | None, scope: IntervalScope) -> dict[str, object]:
    """The steady-state throughput's interval as Metrics holds it: its ends (the low one never below
    0), its +- as a fraction and in percent, and which kind of sure it is; all None without one."""
    if steady is None:
        names = ("low", "high", "relative", "percent", "scope")
        return dict.fromkeys(_STEADY_FIELDS[n] for n in names)
    return {
        _STEADY_FIELDS["low"]: max(0.0, steady.low),
        _STEADY_FIELDS["high"]: steady.high,
        _STEADY_FIELDS["relative"]: steady.relative_half_width,
        _STEADY_FIELDS["percent"]: round(100 * steady.relative_half_width, 2),
        _STEADY_FIELDS["scope"]: scope,
    }


_STEADY_FIELDS = {
    "low": "steady_state_tokens_per_second_ci95_low",
    "high": "steady_state_tokens_per_second_ci95_high",
    "relative": "throughput_ci95_relative",
    "percent": "throughput_ci95_percent",
    "scope": "throughput_ci95_scope",
}


def mean_of_repeats(metrics: Sequence[Metrics]) -> Metrics:
    """One result for repeats of the same work: every number the mean over them (counts rounded),
    the noise flags of any repeat, the per-rank lists of the first, and the intervals of the
    steady-state throughput and step time *across* the repeats (t interval, batches = repeats)."""
    first = metrics[0]
    if len(metrics) == 1:
        return first
    update: dict[str, object] = {}
    for name, value in first:
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        mean = sum(float(getattr(m, name) or 0.0) for m in metrics) / len(metrics)
        update[name] = round(mean) if isinstance(value, int) else mean
    flags = sorted({f for m in metrics for f in m.noise_flags}, key=list(NoiseFlag).index)
    steady = repeats_interval([m.steady_state_tokens_per_second for m in metrics])
    step = repeats_interval([m.step_time_mean_seconds for m in metrics])
    update |= {
        "noise_flags": flags,
        "measurement_quality": MeasurementQuality.FLAGGED if flags else MeasurementQuality.CLEAN,
        **steady_interval_fields(steady, IntervalScope.ACROSS_REPEATS),
        "step_time_mean_ci95_low_seconds": max(0.0, step.low) if step else None,
        "step_time_mean_ci95_high_seconds": step.high if step else None,
    }
    return first.model_copy(update=update)
