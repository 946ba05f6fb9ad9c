"""The memory prediction in a report: each run's predicted tensor peak beside the one it measured.

The trainer predicts every run's plan at the batch it measured its peak at (metrics'
predictedPeakBytes, an estimate, and predictionErrorPercent; docs/measurements.md, "Predicted
memory"); the runs table shows both and the error when any run has them.
"""

from __future__ import annotations

from ftbench.contracts.results import Metrics

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
