"""Pods and workloads reduced to small frozen summaries: what the classification reads.

The pod summaries live in a kopf index (`app.ftbench_pods`), so a sync reads pods from memory;
a summary keeps only what a verdict needs (phase, the trainer container's state and termination
message, the rank and trial labels, deletion), which also keeps the index small.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ftbench.contracts.env import JOB_COMPLETION_INDEX_ANNOTATION
from ftbench.contracts.labels import TRIAL_LABEL
from ftbench.contracts.results import TrainerResult
from ftbench.render.registry import WORKLOAD_KINDS
from ftbench.render.trainjob import JOBSET_NAME_LABEL

PYTORCH_REPLICA_TYPE = "training.kubeflow.org/replica-type"
PYTORCH_REPLICA_INDEX = "training.kubeflow.org/replica-index"
TRAINER_CONTAINERS = ("trainer", "pytorch")


@dataclass(frozen=True)
class ContainerState:
    """The trainer container's current state: waiting, running or terminated (or unknown)."""

    state: str = ""
    reason: str = ""
    message: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class PodSummary:
    """What the operator needs from one training pod (hashable, small: it lives in an index)."""

    name: str
    phase: str
    created: str
    reason: str = ""
    message: str = ""
    start_time: str | None = None
    replica_type: str | None = None
    replica_index: int | None = None
    completion_index: int | None = None
    trial_label: int | None = None
    container: ContainerState = ContainerState()
    deleting: bool = False
    unschedulable: str = ""  # the scheduler's PodScheduled=False message, when it gave up for now
    owner_uid: str = ""  # the controller (Job / PyTorchJob) that made it: pods are only read when it is ours
    jobset: str = ""  # TrainJob pods: the JobSet (named as its TrainJob) whose Job made them


@dataclass(frozen=True)
class WorkloadSummary:
    """A Job, PyTorchJob or TrainJob: its name, whether it is suspended, whether (and why) it finished."""

    kind: str
    name: str
    suspended: bool = False
    succeeded: bool = False
    failed: bool = False
    reason: str = ""
    message: str = ""
    trial_label: int | None = None
    created: str = ""


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _container_state(pod_status: Mapping[str, Any]) -> ContainerState:
    statuses = pod_status.get("containerStatuses") or []
    chosen = next((s for s in statuses if s.get("name") in TRAINER_CONTAINERS), statuses[0] if statuses else None)
    if not chosen:
        return ContainerState()
    for kind in ("terminated", "waiting", "running"):
        detail = (chosen.get("state") or {}).get(kind)
        if detail is not None:
            return ContainerState(
                state=kind,
                reason=str(detail.get("reason") or ""),
                message=str(detail.get("message") or ""),
                exit_code=_int(detail.get("exitCode")),
            )
    return ContainerState()


def summarize_pod(body: Mapping[str, Any]) -> PodSummary:
    """Reduce a Pod to a `PodSummary`; never raises on odd input (bad input must not crash us)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return PodSummary(
        name=str(meta.get("name", "")),
        phase=str(status.get("phase") or "Pending"),
        created=str(meta.get("creationTimestamp") or ""),
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        start_time=status.get("startTime"),
        replica_type=(labels.get(PYTORCH_REPLICA_TYPE) or None),
        replica_index=_int(labels.get(PYTORCH_REPLICA_INDEX)),
        completion_index=_int(annotations.get(JOB_COMPLETION_INDEX_ANNOTATION)),
        trial_label=_int(labels.get(TRIAL_LABEL)),
        container=_container_state(status),
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=next(
            (
                str(c.get("message") or "Unschedulable")
                for c in status.get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            ),
            "",
        ),
        owner_uid=next((str(r.get("uid", "")) for r in meta.get("ownerReferences") or [] if r.get("controller")), ""),
        jobset=str((meta.get("labels") or {}).get(JOBSET_NAME_LABEL, "")),
    )


def summarize_workload(body: Mapping[str, Any], kind: str = "") -> WorkloadSummary:
    """Finished well: a True condition of the kind's `success_conditions` (registry: Complete for a
    Job or TrainJob, Succeeded for a PyTorchJob); badly: a True Failed condition. Suspended:
    spec.suspend (set at creation for Kueue, cleared on admission) or a True Suspended condition."""
    meta = body.get("metadata") or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    true = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    failed = true.get("Failed")
    kind = str(body.get("kind") or kind)  # items of a LIST response carry no kind
    known = next((w for w in WORKLOAD_KINDS if w.kind == kind), None)
    return WorkloadSummary(
        kind=kind,
        name=str(meta.get("name", "")),
        suspended=bool((body.get("spec") or {}).get("suspend")) or "Suspended" in true,
        succeeded=known is not None and any(c in true for c in known.success_conditions),
        failed=failed is not None,
        reason=str((failed or {}).get("reason") or ""),
        message=str((failed or {}).get("message") or ""),
        trial_label=_int((meta.get("labels") or {}).get(TRIAL_LABEL)),
        created=str(meta.get("creationTimestamp") or ""),
    )


def rank_of(pod: PodSummary, trials: int) -> int:
    """Node rank: PyTorchJob Master 0 / Worker i -> i + 1; Indexed Job completion index; else 0.

    Stability pods are single-node trials: their completion index is the trial, not a rank.
    """
    if pod.replica_type:
        return 0 if pod.replica_type.lower() == "master" else (pod.replica_index or 0) + 1
    if trials > 1:
        return 0
    return pod.completion_index or 0


def trial_of(pod: PodSummary) -> int | None:
    return pod.trial_label if pod.trial_label is not None else pod.completion_index


def parse_result(message: str) -> TrainerResult | None:
    """The trainer's result from a termination message, or None (a crash log tail, truncation)."""
    text = message.strip()
    if not text.startswith("{"):
        return None
    try:
        return TrainerResult.from_json(text)
    except (ValueError, ValidationError):
        return None
