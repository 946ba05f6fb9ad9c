"""Every run checks the memory prediction: its plan predicted after training, beside what it measured.

The launcher (the process that waits for the ranks, or the one rank of a single-process run) traces
the plan once the training is over, so the prediction costs the measurement nothing, and holds no
process group of its own for the FSDP trace's fake one to clash with. `predictedPeakBytes` and
`predictionErrorPercent` go into the run's metrics (measured: `gpuMaxMemoryAllocatedBytes` on GPUs,
`cpuTensorPeakBytes` on CPU). A prediction that cannot be made never fails the run: the fields stay
unset and the log says why.
"""

from __future__ import annotations

import logging

from ftbench.api.profile import GpuMemory
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction
from ftbench.contracts.results import TrainerResult
from ftbench.predict.device_memory import device_memory

log = logging.getLogger(__name__)


class RunPrediction:
    """The plan's predicted peak at the batch shape a run measured, traced once per shape for all the
    trials of a run (the predictor's worst batch, every row at modelMaxLength, is not what a run of
    shorter rows measures)."""

    def __init__(self, plan: LaunchPlan, gpu_memory_bytes: int | None = None) -> None:
        self.plan = plan
        self.gpu_memory_bytes = gpu_memory_bytes  # NVML's total of the run's GPU; None on CPU ranks
        self._predictions: dict[tuple[int, int] | None, MemoryPrediction | None] = {}

    def prediction(self, batch: tuple[int, int] | None) -> MemoryPrediction | None:
        if batch not in self._predictions:
            self._predictions[batch] = None
            try:
                from ftbench_trainer.predict.model import predict

                self._predictions[batch] = predict(self.plan, batch=batch, count_rows=False)
            except Exception as exc:  # the prediction is a check of the run, never its outcome
                log.warning("memory prediction not made for this run: %s: %s", type(exc).__name__, exc)
        return self._predictions[batch]

    def peak_bytes(self, batch: tuple[int, int] | None) -> int | None:
        prediction = self.prediction(batch)
        return prediction.peak_bytes if prediction else None

    def device_percent(self, prediction: MemoryPrediction) -> float | None:
        """The device-level peak on this run's GPU (its NVML total; the default profile's context term)."""
        if not self.gpu_memory_bytes or prediction.device != "cuda":
            return None
        return device_memory(prediction, GpuMemory(capacity=str(self.gpu_memory_bytes))).percent

    def beside(self, result: TrainerResult) -> TrainerResult:
        """The result with the predicted peaks and their errors against the measured ones (successful runs)."""
        if result.metrics is None:
            return result
        shape = result.metrics.peak_batch_shape
        prediction = self.prediction((shape[0], shape[1]) if shape else None)
        if prediction is None:
            return result
        metrics = result.metrics.with_prediction(prediction.peak_bytes, self.device_percent(prediction))
        return result.model_copy(update={"metrics": metrics})
