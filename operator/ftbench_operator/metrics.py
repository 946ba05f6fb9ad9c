"""Prometheus metrics (kopf has none of its own): state of experiments and of the operator.

Experiments by phase, reconcile durations and errors, each succeeded experiment's headline results
and throughput interval, the network preflight's peak busbw, and each sweep's points, best value and
device hours; the design notes list every metric with its labels. The names are
ftbench.contracts.operator_metrics', which the chart's dashboard queries.

One registry per `OperatorMetrics` (tests build their own; the operator uses the default one).

Design notes: docs/design-notes.md, "operator/ftbench_operator/metrics.py".
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Mapping
from contextlib import suppress
from types import TracebackType
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ftbench.api.status import Phase
from ftbench.api.sweep import PointPhase
from ftbench.contracts.kube import ObjectKey
from ftbench.contracts.operator_metrics import (
    EXPERIMENTS,
    HEADLINE_RESULTS,
    INTERVAL_LABELS,
    NETWORK_LABELS,
    NETWORK_PEAK,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RESULT_LABELS,
    SWEEP_BEST,
    SWEEP_DEVICE_HOURS,
    SWEEP_DEVICE_HOURS_KINDS,
    SWEEP_LABELS,
    SWEEP_POINTS,
    THROUGHPUT_CI95,
)

# status.counts field -> the point phase it counts (the label value of ftbench_sweep_points).
SWEEP_COUNTS = {
    "pending": PointPhase.PENDING,
    "running": PointPhase.RUNNING,
    "succeeded": PointPhase.SUCCEEDED,
    "gpuOom": PointPhase.GPU_OOM,
    "failed": PointPhase.FAILED,
    "invalid": PointPhase.INVALID,
    "skipped": PointPhase.SKIPPED,
    "reused": PointPhase.REUSED,
}


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.experiments = Gauge(EXPERIMENTS, "Experiments by phase.", ["phase"], registry=registry)
        self.reconcile_seconds = Histogram(
            RECONCILE_SECONDS,
            "Time spent in a handler.",
            ["handler"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.errors = Counter(RECONCILE_ERRORS, "Handler failures by kind.", ["handler", "kind"], registry=registry)
        self.results = {
            field: Gauge(name, f"status.results.{field} of succeeded experiments.", RESULT_LABELS, registry=registry)
            for field, name in HEADLINE_RESULTS.items()
        }
        self.network_peak = Gauge(
            NETWORK_PEAK,
            "status.environment.network.peakBusBandwidthGbps: the network preflight's largest busbw (GB/s), "
            "labelled with the backend and the transport it used.",
            NETWORK_LABELS,
            registry=registry,
        )
        self.sweep_points = Gauge(
            SWEEP_POINTS, "Points of a sweep by phase.", [*SWEEP_LABELS, "phase"], registry=registry
        )
        self.sweep_best = Gauge(
            SWEEP_BEST,
            "The objective value of a sweep's best point (status.best).",
            [*SWEEP_LABELS, "metric"],
            registry=registry,
        )
        self.throughput_ci95 = Gauge(
            THROUGHPUT_CI95,
            "status.results.throughputCi95Relative: half-width / estimate of the steady tokens/s 95% interval; label "
            "scope: withinRun (one run's steps) or acrossRepeats.",
            INTERVAL_LABELS,
            registry=registry,
        )
        self.sweep_device_hours = Gauge(
            SWEEP_DEVICE_HOURS,
            "status.deviceHours of a sweep: device-hours spent and saved (kinds ending in Estimate are estimates).",
            [*SWEEP_LABELS, "kind"],
            registry=registry,
        )
        self._phases: dict[ObjectKey, str] = {}
        self._sweep_best: dict[ObjectKey, str] = {}  # the metric label each sweep's best gauge carries
        self._result_labels: dict[ObjectKey, tuple[str, ...]] = {}
        self._network_labels: dict[ObjectKey, tuple[str, ...]] = {}
        self._interval_labels: dict[ObjectKey, tuple[str, ...]] = {}

    def start(self, port: int) -> None:
        if port:
            start_http_server(port, registry=self.registry)

    def timed(self, handler: str) -> Timed:
        """Times a handler's run and counts the exception it ends with (which goes on)."""
        return Timed(self, handler)

    def observe(self, body: Mapping[str, Any]) -> None:
        """Record one experiment's phase and (if it succeeded) its headline results."""
        meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        self._phases[key] = str(status.get("phase") or Phase.PENDING.value)
        self._publish_phases()
        labels = (
            *key,
            str(spec.get("model", "")),
            str(spec.get("experiment", "")),
            str(spec.get("numberGpus", "")),
        )
        self._observe_network(key, labels, (status.get("environment") or {}).get("network"))
        results = status.get("results") if status.get("phase") == Phase.SUCCEEDED.value else None
        if not isinstance(results, Mapping):
            self._drop_results(key)
            return
        if self._result_labels.get(key) not in (None, labels):
            self._drop_results(key)
        self._result_labels[key] = labels
        for field, gauge in self.results.items():
            value = results.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.labels(*labels).set(value)
        ratio, scope = results.get("throughputCi95Relative"), results.get("throughputCi95Scope")
        if isinstance(ratio, int | float) and isinstance(scope, str):
            self._interval_labels[key] = (*labels, scope)
            self.throughput_ci95.labels(*labels, scope).set(ratio)

    def _observe_network(self, key: ObjectKey, labels: tuple[str, ...], network: Any) -> None:
        """The preflight's peak busbw under its backend and transport; none (yet, or after a retry): no series."""
        network = network if isinstance(network, Mapping) else {}
        peak = network.get("peakBusBandwidthGbps")
        if not isinstance(peak, int | float):
            self._drop_network(key)
            return
        full = (*labels, *(str(network.get(f) or "") for f in ("backend", "transport", "linkLayer")))
        if self._network_labels.get(key) not in (None, full):
            self._drop_network(key)
        self._network_labels[key] = full
        self.network_peak.labels(*full).set(peak)

    def forget(self, namespace: str, name: str) -> None:
        self._phases.pop((namespace, name), None)
        self._drop_results((namespace, name))
        self._drop_network((namespace, name))
        self._publish_phases()

    def _drop_network(self, key: ObjectKey) -> None:
        labels = self._network_labels.pop(key, None)
        if labels is not None:
            with suppress(KeyError):
                self.network_peak.remove(*labels)

    def _drop_results(self, key: ObjectKey) -> None:
        labels = self._result_labels.pop(key, None)
        if labels is None:
            return
        for gauge in self.results.values():
            with suppress(KeyError):
                gauge.remove(*labels)
        interval = self._interval_labels.pop(key, None)
        if interval is not None:
            with suppress(KeyError):
                self.throughput_ci95.remove(*interval)

    def _publish_phases(self) -> None:
        counts = Tally(self._phases.values())
        for phase in Phase:
            self.experiments.labels(phase.value).set(counts.get(phase.value, 0))

    def observe_sweep(self, body: Mapping[str, Any]) -> None:
        """Record one sweep's points per phase and its best value (from its status, as written)."""
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        counts = status.get("counts")
        counts = counts if isinstance(counts, Mapping) else {}
        for field, phase in SWEEP_COUNTS.items():
            value = counts.get(field, 0)
            self.sweep_points.labels(*key, phase.value).set(value if isinstance(value, int | float) else 0)
        hours = status.get("deviceHours")
        hours = hours if isinstance(hours, Mapping) else {}
        for kind in SWEEP_DEVICE_HOURS_KINDS:
            value = hours.get(kind)
            if isinstance(value, int | float):
                self.sweep_device_hours.labels(*key, kind).set(value)
        best = status.get("best")
        best = best if isinstance(best, Mapping) else {}
        metric, value = best.get("metric"), best.get("value")
        if self._sweep_best.get(key) not in (None, metric):
            self._drop_sweep_best(key)
        if isinstance(metric, str) and isinstance(value, int | float):
            self._sweep_best[key] = metric
            self.sweep_best.labels(*key, metric).set(value)

    def forget_sweep(self, namespace: str, name: str) -> None:
        for phase in SWEEP_COUNTS.values():
            with suppress(KeyError):
                self.sweep_points.remove(namespace, name, phase.value)
        for kind in SWEEP_DEVICE_HOURS_KINDS:
            with suppress(KeyError):
                self.sweep_device_hours.remove(namespace, name, kind)
        self._drop_sweep_best((namespace, name))

    def _drop_sweep_best(self, key: ObjectKey) -> None:
        metric = self._sweep_best.pop(key, None)
        if metric is not None:
            with suppress(KeyError):
                self.sweep_best.remove(*key, metric)


class Timed:
    """`with metrics.timed(handler):` observes the duration and, when the body raised, counts the
    error by type; the exception always propagates (`__exit__` returns None)."""

    def __init__(self, metrics: OperatorMetrics, handler: str) -> None:
        self.metrics, self.handler = metrics, handler
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if err is not None and isinstance(err, Exception):
            self.metrics.errors.labels(self.handler, type(err).__name__).inc()
        self.metrics.reconcile_seconds.labels(self.handler).observe(time.perf_counter() - self.start)
