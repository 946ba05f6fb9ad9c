"""Progress and headline metrics into Kubeflow Trainer's `TrainJob.status.trainerStatus`.

When the trainer runs in a TrainJob whose controller has the `TrainJobStatus` feature gate on, rank 0
posts the progress percentage, the estimated remaining time and the headline metrics
(ftbench.contracts.trainer_status has the request). It sets `DISABLE_KUBEFLOW_INTEGRATION=TRUE` so
that transformers' own `KubeflowCallback` does not replace its metrics. Reporting never fails training
(`ftbench_trainer.sender`): a failed report is counted and recorded
(`status.environment.kubeflowTrainerStatus`).

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/kubeflow_status.py".
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftbench.contracts import env as E
from ftbench.contracts import trainer_status as T
from ftbench.contracts.progress import MEMORY_CPU_RSS, ProgressUpdate
from ftbench.contracts.results import Metrics
from ftbench.kubeapi import http
from ftbench.kubeapi.endpoint import ApiEndpoint
from ftbench_trainer.sender import ThrottledSender

log = logging.getLogger(__name__)


def _memory_metric(kind: str) -> str:
    return T.CPU_PEAK_MEMORY if kind == MEMORY_CPU_RSS else T.GPU_PEAK_MEMORY


def running_metrics(update: ProgressUpdate) -> dict[str, float | int | None]:
    """The metrics of an update while training (rank 0's estimates, as in status.progress)."""
    metrics: dict[str, float | int | None] = {
        T.LOSS: update.loss,
        T.TOKENS_PER_SECOND: round(update.tokens_per_second, 3),
        T.STEP_TIME: update.step_time_seconds,
        T.CURRENT_STEP: update.step,
        T.TOTAL_STEPS: update.total_steps or None,
    }
    if update.peak_memory_bytes is not None:
        metrics[_memory_metric(update.memory_kind)] = update.peak_memory_bytes
    return metrics


def final_metrics(result: Metrics, last: ProgressUpdate | None, loss: float | None) -> dict[str, float | int | None]:
    """The last update's metrics: the run's measured result (status.results) where it has the
    figure, the last logged loss, else the last progress update's (step counts, peak RSS on CPU)."""
    metrics = running_metrics(last) if last is not None else {}
    measured: dict[str, float | int | None] = {
        T.LOSS: loss,
        T.TOKENS_PER_SECOND: round(result.train_tokens_per_second, 3),
        T.TOKENS_PER_SECOND_CI95: result.throughput_ci95_relative,
        T.STEP_TIME: result.step_time_mean_seconds or None,
    }
    if last is None or last.memory_kind != MEMORY_CPU_RSS:
        measured[T.GPU_PEAK_MEMORY] = result.gpu_max_memory_allocated_bytes or None
    return metrics | {k: v for k, v in measured.items() if v is not None}


class KubeflowStatusReporter(ThrottledSender):
    """POSTs `{"trainerStatus": ...}` to the TrainJob's status endpoint; never raises."""

    def __init__(
        self,
        url: str,
        *,
        token_file: Path,
        ca_file: Path | None,
        min_interval_seconds: float = T.MIN_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            "Kubeflow trainerStatus update",
            min_interval_seconds=max(T.MIN_INTERVAL_SECONDS, min_interval_seconds),
            clock=clock,
        )
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        # The token file is re-read for every request: the projected token rotates.
        self.endpoint = ApiEndpoint(server=f"{parts.scheme}://{parts.netloc}", token_file=token_file, ca_file=ca_file)
        self.last: ProgressUpdate | None = None

    @classmethod
    def from_environ(
        cls, environ: MutableMapping[str, str] | None = None, *, progress_interval_seconds: float = 0.0
    ) -> KubeflowStatusReporter | None:
        """The reporter when Trainer injected its endpoint, else None. Switches transformers' own
        callback off in `environ` (the process's environment by default) while this one reports."""
        environ = os.environ if environ is None else environ
        url = environ.get(E.KUBEFLOW_TRAINER_SERVER_URL, "")
        if not url or environ.get(E.DISABLE_KUBEFLOW_INTEGRATION, "").upper() == "TRUE":
            return None
        token, ca = environ.get(E.KUBEFLOW_TRAINER_SERVER_TOKEN, ""), environ.get(E.KUBEFLOW_TRAINER_SERVER_CA_CERT)
        reporter = cls(
            url,
            token_file=Path(token),
            ca_file=Path(ca) if ca else None,
            min_interval_seconds=progress_interval_seconds,
        )
        environ[E.DISABLE_KUBEFLOW_INTEGRATION] = "TRUE"
        return reporter

    def update(self, progress: ProgressUpdate) -> None:
        """The trainer's ProgressSink protocol: progress is capped at 99 % until `finish` (as
        transformers' callback does), so 100 % means the result is known."""
        self.last = progress
        percent = min(99.0, 100.0 * progress.step / progress.total_steps) if progress.total_steps else None
        metrics = running_metrics(progress)
        self.offer(lambda: T.status_request(percent=percent, eta_seconds=progress.eta_seconds, metrics=metrics,
                                            now=datetime.now(UTC)).to_wire())  # fmt: skip

    def finish(self, result: Metrics, *, loss: float | None) -> None:
        """The last update once the run measured its result: 100 %, no time left, the measured
        metrics and the last logged loss. A run that failed sends none: its progress stays where
        it stopped."""
        metrics = final_metrics(result, self.last, loss)
        self.offer(
            lambda: T.status_request(percent=100, eta_seconds=0, metrics=metrics, now=datetime.now(UTC)).to_wire(),
            final=True,
        )

    def report(self) -> T.TrainerStatusReport:
        """How the updates went, for the run's environment."""
        return T.TrainerStatusReport(
            url=self.url[:512], sent=self.sent, failures=self.failures, last_error=self.last_error or ""
        )

    def _send(self, body: Mapping[str, Any]) -> None:
        http.request(self.endpoint, "POST", self.path, body, timeout=self.timeout)
