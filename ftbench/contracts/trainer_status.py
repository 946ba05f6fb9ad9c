"""Kubeflow Trainer's TrainJob runtime status (KEP-2779): the request ftbench's trainer posts.

Read from kubeflow/trainer v2.3.0 (`pkg/statusserver`, `pkg/runtime/framework/plugins/trainjobstatus`,
`UpdateTrainJobStatusRequest` in `pkg/apis/trainer/v1alpha1`), behind the controller's alpha
`TrainJobStatus` feature gate. One request, `POST <url>` with a bearer token and the JSON body
`{"trainerStatus": {...}}`, replaces all metrics, so there must be one reporter per TrainJob
(ftbench's rank 0). The metric names are ftbench's, snake_case with the unit at the end like
transformers' own; docs/architecture.md lists them with their meaning.
Imports pydantic only: the trainer image loads this without kopf.

Design notes: docs/design-notes.md, "ftbench/contracts/trainer_status.py".
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from ftbench.contracts.bounded import BoundedName
from ftbench.contracts.wire import WireModel

TRAINER_STATUS_GROUP = "trainer.kubeflow.org"
INT32_MAX = 2**31 - 1
METRIC_TEXT_LIMIT = 64
METRICS_LIMIT = 256
# Upstream's guidance for clients (docs/user-guides/trainjob-progress.md and the SDK): at most one
# update every 5 seconds, so the controller and the API server are not flooded.
MIN_INTERVAL_SECONDS = 5.0

# The metrics ftbench reports: while training, estimates from rank 0 (like status.progress);
# in the last update, the run's measured results (status.results).
LOSS = "loss"
CURRENT_STEP = "current_step"
TOTAL_STEPS = "total_steps"
TOKENS_PER_SECOND = "tokens_per_second"
TOKENS_PER_SECOND_CI95 = "tokens_per_second_ci95_relative"
STEP_TIME = "step_time_seconds"
GPU_PEAK_MEMORY = "gpu_max_memory_allocated_bytes"
CPU_PEAK_MEMORY = "cpu_peak_rss_bytes"


def status_path(namespace: str, name: str) -> str:
    """The endpoint's path for one TrainJob (upstream `statusserver.StatusUrl`)."""
    return f"/apis/{TRAINER_STATUS_GROUP}/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def token_audience(namespace: str, name: str) -> str:
    """The audience the token must carry for that TrainJob (upstream `statusserver.TokenAudience`)."""
    return f"{TRAINER_STATUS_GROUP}/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


MetricText = Annotated[str, Field(min_length=1, max_length=METRIC_TEXT_LIMIT)]


class TrainerStatusMetric(WireModel):
    name: MetricText
    value: MetricText


class TrainerStatus(WireModel):
    """`TrainJob.status.trainerStatus`, as the v2.3.0 CRD declares it."""

    progress_percentage: Annotated[int, Field(ge=0, le=100)] | None = None
    estimated_remaining_seconds: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    metrics: Annotated[list[TrainerStatusMetric], Field(max_length=METRICS_LIMIT)] = Field(default_factory=list)
    last_updated_time: datetime


class UpdateTrainJobStatusRequest(WireModel):
    """The body of one POST to the status endpoint."""

    trainer_status: TrainerStatus | None = None

    def to_wire(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def metric_value(value: float | int) -> str:
    """A metric as the API wants it: a string; integers as such, others with 6 significant digits."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{float(value):.6g}"


def status_request(
    *,
    percent: float | None,
    eta_seconds: float | None,
    metrics: dict[str, float | int | None],
    now: datetime,
) -> UpdateTrainJobStatusRequest:
    """One update: values clamped into the schema's bounds (a report must never be rejected for a
    stray value), metrics without a value left out, the time in UTC to whole seconds."""
    return UpdateTrainJobStatusRequest(
        trainer_status=TrainerStatus(
            progress_percentage=None if percent is None else max(0, min(100, int(percent))),
            estimated_remaining_seconds=None if eta_seconds is None else max(0, min(INT32_MAX, round(eta_seconds))),
            metrics=[TrainerStatusMetric(name=k, value=metric_value(v)) for k, v in metrics.items() if v is not None][
                :METRICS_LIMIT
            ],
            last_updated_time=now.astimezone(UTC).replace(microsecond=0),
        )
    )


class TrainerStatusReport(WireModel):
    """How the run's updates to Kubeflow Trainer went (status.environment.kubeflowTrainerStatus)."""

    url: BoundedName = Field(description="KUBEFLOW_TRAINER_SERVER_URL the updates went to.")
    sent: Annotated[int, Field(ge=0)] = Field(0, description="Updates the endpoint accepted.")
    failures: Annotated[int, Field(ge=0)] = Field(
        0, description="Updates that failed (endpoint unreachable, TLS, token or the server's refusal)."
    )
    last_error: BoundedName = Field("", description="The last failure, with the server's answer when there was one.")
