"""The predictions in a report: each run's predicted tensor peak and throughput beside what it measured.

The trainer predicts every run's plan at the batch it measured its peak at (metrics'
predictedPeakBytes, an estimate, and predictionErrorPercent; docs/measurements.md, "Predicted
memory"); the runs table shows both and the error when any run has them. The throughput predicted for a GPU
run's spec (docs/measurements.md, "Predicted throughput") shows beside its steady tokens/s in the runs
table, and beside the mean over a sweep point's runs in the sweep's table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ftbench.api.prediction_report import ThroughputAccuracy, all_gather_bus_bytes
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.results import Metrics
from ftbench.predict.fleet_accuracy import question, throughput_accuracy
from ftbench.predict.throughput import predict_throughput
from ftbench.report.data import RunMeasurement

COLUMN_HEADERS = ("predicted tensor MiB (estimate)", "measured tensor MiB", "prediction error %")
MIB = 2**20


def run_columns(m: Metrics | None) -> tuple[str, str, str]:
    """Predicted and measured tensor peak (MiB) and the error in percent; empty cells without a prediction."""
    if m is None or m.predicted_peak_bytes is None:
        return ("", "", "")
    measured = m.measured_tensor_peak_bytes
    error = m.prediction_error_percent
    return (
        f"{m.predicted_peak_bytes / MIB:.1f}",
        f"{measured / MIB:.1f}" if measured else "",
        f"{error:+.1f}" if error is not None else "",
    )


THROUGHPUT_HEADERS = (
    "predicted tokens/s (estimate)",
    "tokens/s prediction error %",
    "how sure: out-of-sample p90 error %",
)


def throughput_columns(
    spec: FineTuneExperimentSpec | None, run: RunMeasurement, catalog: Catalog
) -> tuple[str, str, str]:
    """The throughput predicted for the run's spec (pure arithmetic: ftbench.predict.throughput; with its network
    preflight's bus bandwidth where it had one) and its error against the measured steady tokens/s; empty
    cells where there is no prediction (CPU ranks)."""
    m = run.metrics
    measured = m.steady_state_tokens_per_second if m is not None else None
    return throughput_cells(spec, measured, catalog, all_gather_bus_bytes(run.network))


def point_throughput_columns(
    spec: FineTuneExperimentSpec | None, runs: Sequence[RunMeasurement], point: int, catalog: Catalog
) -> tuple[str, str, str]:
    """A sweep point's predicted tokens/s (with its runs' mean preflight bus bandwidth where they had one) and
    its error against the mean steady tokens/s of its runs."""
    mine = [r for r in runs if r.point == point and r.metrics is not None and r.metrics.steady_state_tokens_per_second]
    steady = [r.metrics.steady_state_tokens_per_second for r in mine if r.metrics is not None]
    buses = [bus for r in mine if (bus := all_gather_bus_bytes(r.network))]
    return throughput_cells(spec, statistics.fmean(steady) if steady else None, catalog,
                            statistics.fmean(buses) if buses else None)  # fmt: skip


def throughput_cells(
    spec: FineTuneExperimentSpec | None, measured: float | None, catalog: Catalog, bus: float | None = None
) -> tuple[str, str, str]:
    predicted = predict_throughput(spec, catalog) if spec is not None else None
    if spec is None or predicted is None:
        return ("", "", "")
    if bus:
        predicted = predicted.with_bus_bandwidth(bus)
    value = predicted.tokens_per_second_estimate
    error = f"{100.0 * (value - measured) / measured:+.1f}" if measured else ""
    return (f"{value:,.1f}", error, band_cell(throughput_accuracy(question(spec, catalog))))


def band_cell(accuracy: ThroughputAccuracy | None) -> str:
    """The fleet's out-of-sample 90th-percentile error and how it was validated, and whether the spec lies outside
    the calibration (the band is then widened; `ftbench predict` and status.prediction name each way)."""
    if accuracy is None:
        return ""
    outside = ": outside the calibration" if accuracy.outside_calibration else ""
    return f"{accuracy.p90_percent:.0f} ({accuracy.validation}{outside})"
