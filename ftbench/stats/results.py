"""Intervals of result metrics over one configuration's runs (a sweep point, a spec's repeats)."""

from __future__ import annotations

from collections.abc import Sequence

from ftbench.contracts.results import Metrics
from ftbench.stats.intervals import Interval, repeats_interval


def field_name(metric: str) -> str:
    """The Metrics field of a wire name (`trainTokensPerSecond` -> `train_tokens_per_second`)."""
    return next((n for n, f in Metrics.model_fields.items() if (f.alias or n) == metric), metric)


def metric_interval(metrics: Sequence[Metrics], metric: str) -> Interval | None:
    """The 95 % interval of `metric` (a wire name) over runs of one configuration: the t interval
    across them (fresh processes, so independent) with two or more; with one, the run's own
    throughputCi95Relative where the metric is a per-second rate or MFU (they scale with the step
    time); None where nothing says how sure the number is."""
    name = field_name(metric)
    values = [float(getattr(m, name)) for m in metrics]
    if len(values) > 1:
        return repeats_interval(values)
    rel = metrics[0].throughput_ci95_relative if metrics else None
    if rel is None or not (name.endswith("_per_second") or name == "mfu_percent"):
        return None
    return Interval(values[0], values[0] * (1 - rel), values[0] * (1 + rel), 1)
