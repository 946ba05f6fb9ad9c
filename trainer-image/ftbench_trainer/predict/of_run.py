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

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.results import TrainerResult

log = logging.getLogger(__name__)


class RunPrediction:
    """The plan's predicted peak at the batch shape a run measured, traced once per shape for all the
    trials of a run (the predictor's worst batch, every row at modelMaxLength, is not what a run of
    shorter rows measures)."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self._peaks: dict[tuple[int, int] | None, int | None] = {}

    def peak_bytes(self, batch: tuple[int, int] | None) -> int | None:
        if batch not in self._peaks:
            self._peaks[batch] = None
            try:
                from ftbench_trainer.predict.model import predict

                self._peaks[batch] = predict(self.plan, batch=batch).peak_bytes
            except Exception as exc:  # the prediction is a check of the run, never its outcome
                log.warning("memory prediction not made for this run: %s: %s", type(exc).__name__, exc)
        return self._peaks[batch]

    def beside(self, result: TrainerResult) -> TrainerResult:
        """The result with the predicted peak and its error against the measured one (successful runs)."""
        if result.metrics is None:
            return result
        shape = result.metrics.peak_batch_shape
        peak = self.peak_bytes((shape[0], shape[1]) if shape else None)
        if peak is None:
            return result
        return result.model_copy(update={"metrics": result.metrics.with_prediction(peak)})
