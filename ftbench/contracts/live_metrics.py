"""Live training metrics every trainer rank serves while it trains, in Prometheus' text format.

Platform teams watch training in Prometheus, not in `status.progress` (rank 0's, every 10 s) or in the
result (at the end). The first rank of each node (one per pod) serves `GET /metrics` on
`TRAINER_METRICS_PORT` (the pod's port named
`METRICS_PORT_NAME`, which the chart's trainer PodMonitor scrapes) from its first step to its exit, with
what it measured so far. Names follow Prometheus' conventions (base units, `_seconds`, `_bytes`, a
`_total` counter); every series carries the experiment's labels and the rank. The operator's own metrics
(ftbench_operator.metrics) are the final figures; these are the live ones, so their names say `trainer`.

The same update feeds the progress line and `status.progress` (ftbench.contracts.progress): one
measurement, three destinations. Defined here once because the trainer writes these names and the
chart's dashboards and the tests read them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ftbench.contracts.progress import ProgressUpdate

TRAINER_METRICS_PORT = 9402
METRICS_PORT_NAME = "metrics"
METRICS_PATH = "/metrics"
# The label names every series carries (values from the plan, the rank from the process).
LABELS = ("namespace", "name", "experiment", "model", "engine", "attempt", "rank")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class LiveMetric:
    name: str
    kind: str  # gauge or counter
    help: str


STEPS = LiveMetric("ftbench_trainer_steps_total", "counter", "Optimizer steps this rank has finished.")
PLANNED_STEPS = LiveMetric("ftbench_trainer_planned_steps", "gauge", "Steps the Trainer plans (0 when unknown).")
ELAPSED = LiveMetric("ftbench_trainer_elapsed_seconds", "gauge", "Seconds since this rank's first step began.")
TOKENS_PER_SECOND = LiveMetric(
    "ftbench_trainer_tokens_per_second",
    "gauge",
    "Padded training tokens per second so far, all ranks (this rank's count x world size: an estimate until "
    "the result's exact count).",
)
STEP_TIME = LiveMetric("ftbench_trainer_step_time_seconds", "gauge", "Mean seconds per step so far, warm-up included.")
ETA = LiveMetric("ftbench_trainer_eta_seconds", "gauge", "Estimated seconds left (elapsed / step x steps left).")
LOSS = LiveMetric("ftbench_trainer_loss", "gauge", "The last training loss the Trainer logged.")
PEAK_MEMORY = LiveMetric(
    "ftbench_trainer_peak_memory_bytes",
    "gauge",
    "This rank's peak memory so far; label kind: gpuMaxMemoryAllocated (torch) or cpuPeakRss (the process).",
)
STEADY_CI95 = LiveMetric(
    "ftbench_trainer_steady_tokens_per_second_ci95_ratio",
    "gauge",
    "Half-width / estimate of this rank's steady-state tokens/s 95% interval so far (batch means over its steady "
    "steps; within this run only, so it says nothing of run-to-run spread).",
)
ALL = (STEPS, PLANNED_STEPS, ELAPSED, TOKENS_PER_SECOND, STEP_TIME, ETA, LOSS, PEAK_MEMORY, STEADY_CI95)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str], extra: Mapping[str, str] | None = None) -> str:
    pairs = {**labels, **(extra or {})}
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(pairs.items())) + "}"


def exposition(update: ProgressUpdate | None, labels: Mapping[str, str]) -> str:
    """The text a scrape gets: every metric with a value (none before the first step, but the help and
    type lines, so a scraper sees the families)."""
    values: dict[LiveMetric, float | None] = {}
    if update is not None:
        values = {
            STEPS: update.step,
            PLANNED_STEPS: update.total_steps,
            ELAPSED: update.elapsed_seconds,
            TOKENS_PER_SECOND: update.tokens_per_second,
            STEP_TIME: update.step_time_seconds,
            ETA: update.eta_seconds,
            LOSS: update.loss,
            PEAK_MEMORY: update.peak_memory_bytes,
            STEADY_CI95: update.steady_ci95_relative,
        }
    lines = []
    for metric in ALL:
        lines += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.kind}"]
        value = values.get(metric)
        if value is None:
            continue
        extra = {"kind": update.memory_kind} if metric is PEAK_MEMORY and update is not None else None
        lines.append(f"{metric.name}{_labels(labels, extra)} {float(value)!r}")
    return "\n".join(lines) + "\n"
