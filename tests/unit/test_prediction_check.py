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


def test_gpu_runs_record_the_device_level_pair_too() -> None:
    """On GPUs the device-level prediction (as NVML counts it) is kept beside NVML's measured peak; CPU ranks
    have no NVML peak, so nothing is recorded there."""
    gpu = Metrics.model_validate(
        {**BASE, "gpuMaxMemoryAllocatedBytes": 200 * MIB, "gpuMemoryUtilizationPeakPercent": 61.0}
    )
    checked = gpu.with_prediction(210 * MIB, device_percent=64.5)
    assert checked.predicted_gpu_memory_peak_percent == 64.5 and checked.gpu_memory_prediction_error_points == 3.5
    cpu = Metrics.model_validate({**BASE, "cpuTensorPeakBytes": 100 * MIB}).with_prediction(
        110 * MIB, device_percent=5.0
    )
    assert cpu.predicted_gpu_memory_peak_percent is None and cpu.gpu_memory_prediction_error_points is None


def test_a_run_on_a_gpu_gets_its_device_level_percent_from_the_cards_total() -> None:
    from ftbench.contracts.prediction import MemoryPrediction, MemorySplit

    pytest = __import__("pytest")
    of_run = pytest.importorskip("ftbench_trainer.predict.of_run")
    gib = 2**30
    prediction = MemoryPrediction(
        peak_bytes=40 * gib, split=MemorySplit(parameters_bytes=0, gradients_bytes=0, optimizer_bytes=0,
                                               activations_bytes=0), phase="backward", device="cuda", world_size=1,
        sharding="none", traced_parameters=1, trainable_parameters=1, seconds=1.0,
    )  # fmt: skip
    checker = of_run.RunPrediction.__new__(of_run.RunPrediction)
    checker.gpu_memory_bytes = 80 * gib
    # 40 GiB of tensors and the default context (1720Mi) on one GPU of 80 GiB.
    assert checker.device_percent(prediction) == round(100 * (40 * gib + 1720 * 2**20) / (80 * gib), 1)
    checker.gpu_memory_bytes = None
    assert checker.device_percent(prediction) is None


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
