"""Every run's memory-prediction check as readers see it: the metrics' error, the report's columns,
the results table's column (the trainer side runs for real in tests/trainer/test_fsdp_cpu.py)."""

from __future__ import annotations

from typing import Any

from ftbench.contracts.results import Metrics
from ftbench.local.store import RunRecord
from ftbench.report import prediction

BASE: dict[str, Any] = {
    "trainRuntimeSeconds": 1.0, "trainSteps": 1, "trainSamples": 1, "trainTokens": 1, "trainNonPaddingTokens": 1,
    "trainSamplesPerSecond": 1.0, "trainStepsPerSecond": 1.0, "trainTokensPerSecond": 1.0,
    "trainTokensPerGpuPerSecond": 1.0, "datasetTokensPerSecond": 1.0, "datasetTokensPerSecondPerGpu": 1.0,
}  # fmt: skip
MIB = 2**20


def test_the_error_is_against_the_gpu_peak_else_the_cpu_tensor_peak() -> None:
    cpu = Metrics.model_validate({**BASE, "cpuTensorPeakBytes": 100 * MIB}).with_prediction(110 * MIB)
    assert cpu.prediction_error_percent == 10.0 and cpu.predicted_peak_bytes == 110 * MIB
    gpu = Metrics.model_validate({**BASE, "gpuMaxMemoryAllocatedBytes": 200 * MIB, "cpuTensorPeakBytes": 1})
    assert gpu.with_prediction(150 * MIB).prediction_error_percent == -25.0
    nothing_measured = Metrics.model_validate(BASE).with_prediction(5)
    assert nothing_measured.predicted_peak_bytes == 5 and nothing_measured.prediction_error_percent is None


def test_report_columns() -> None:
    m = Metrics.model_validate({**BASE, "cpuTensorPeakBytes": 64 * MIB}).with_prediction(72 * MIB)
    assert prediction.run_columns(m) == ("72.0", "64.0", "+12.5")
    assert prediction.run_columns(Metrics.model_validate(BASE)) == ("", "", "")
    assert prediction.run_columns(None) == ("", "", "")


def test_results_table_reads_the_last_result_that_has_an_error() -> None:
    record = RunRecord(
        id="r", name="n", started_at="", finished_at=None, experiment="e", engine="trl", model="m", number_gpus=0,
        batch_size=1, model_max_length=8, status="Succeeded", is_valid=True, train_tokens_per_second=1.0, run_dir="",
        spec={}, results=[{"metrics": {"predictionErrorPercent": 3.5}}, {"metrics": {}}],
    )  # fmt: skip
    assert record.prediction_error_percent == 3.5
