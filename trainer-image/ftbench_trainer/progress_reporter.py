"""Live progress from the trainer's rank 0 into `FineTuneExperiment.status.progress`.

Rank 0 merge-patches *only* `status.progress` through the status subresource, with its pod's service
account (the per-experiment Role of `ftbench.render.access`); the operator never writes `progress`
while a run is active, so there is one writer per field. Reporting must never fail or slow training
(`ftbench_trainer.sender.ThrottledSender`): `report()` only stores the latest values for a daemon
thread to send, throttled, and errors are logged, counted and otherwise ignored. The body is
`ftbench.contracts.progress.Progress`, the model the CRD declares. `ProgressReporter` also implements
the trainer's `ProgressSink` protocol (`update(progress)`).

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/progress_reporter.py".
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ftbench.api.resource import GROUP, PLURAL, VERSION
from ftbench.contracts import env as E
from ftbench.contracts.progress import Progress, ProgressUpdate
from ftbench.kubeapi import http
from ftbench.kubeapi.endpoint import SERVICE_ACCOUNT_DIR, ApiEndpoint
from ftbench.kubeapi.wire import MERGE_PATCH
from ftbench_trainer.sender import DEFAULT_TIMEOUT_SECONDS, ThrottledSender

__all__ = ["SERVICE_ACCOUNT_DIR", "ApiEndpoint", "ProgressReporter", "progress_body"]

log = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_SECONDS = 10.0


def progress_body(
    step: int, total: int, tokens_per_second: float, eta: float | None, trial: int | None, now: datetime
) -> dict[str, Any]:
    """The `status.progress` object, as the merge patch carries it."""
    return Progress.reported(step, total, tokens_per_second, eta, trial, now).to_wire()


class ProgressReporter(ThrottledSender):
    """Throttled, non-blocking, failure-proof `status.progress` patches for one experiment."""

    def __init__(
        self,
        namespace: str,
        name: str,
        endpoint: ApiEndpoint,
        *,
        trial: int | None = None,
        min_interval_seconds: float = DEFAULT_MIN_INTERVAL_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            "progress report", min_interval_seconds=min_interval_seconds, timeout_seconds=timeout_seconds, clock=clock
        )
        self.namespace, self.name, self.endpoint, self.trial = namespace, name, endpoint, trial

    @classmethod
    def from_plan(cls, plan: Any, environ: Mapping[str, str] | None = None, **kwargs: Any) -> ProgressReporter | None:
        """For a `LaunchPlan`: None unless the plan asks for reports and the pod can reach the API."""
        environ = os.environ if environ is None else environ
        try:
            if not plan.output.report_progress_to_kubernetes:
                return None
            ref = plan.experiment_ref
            namespace = environ.get(E.FTBENCH_NAMESPACE) or ref.namespace
            endpoint = ApiEndpoint.in_cluster(environ)
            if not (ref.name and namespace and endpoint):
                return None
            trial = int(environ[E.FTBENCH_TRIAL_INDEX]) if environ.get(E.FTBENCH_TRIAL_INDEX, "").isdigit() else None
            kwargs.setdefault("min_interval_seconds", plan.output.progress_interval_seconds)
            return cls(namespace, ref.name, endpoint, trial=trial, **kwargs)
        except (OSError, ValueError, KeyError, AttributeError) as err:  # no token, bad env: no reason to stop training
            log.warning("progress reports to Kubernetes disabled: %s", err)
            return None

    @property
    def path(self) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{self.name}/status"

    @property
    def url(self) -> str:
        return self.endpoint.url(self.path)

    def report(
        self, step: int, total: int, tokens_per_second: float, eta: float | None = None, *, final: bool = False
    ) -> bool:
        """Queue a report; False when throttled (or closed). Never raises, never blocks on I/O."""
        return self.offer(
            lambda: progress_body(step, total, tokens_per_second, eta, self.trial, datetime.now(UTC)), final=final
        )

    def update(self, progress: ProgressUpdate) -> None:
        """The trainer's ProgressSink protocol."""
        self.report(progress.step, progress.total_steps, progress.tokens_per_second, progress.eta_seconds)

    def _send(self, progress: dict[str, Any]) -> None:
        body = {"status": {"progress": progress}}
        http.request(self.endpoint, "PATCH", self.path, body, content_type=MERGE_PATCH, timeout=self.timeout)
