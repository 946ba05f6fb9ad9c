"""What happened to a run, decided from the children alone: pure functions, no API calls.

The operator reduces every Pod and workload (Job / PyTorchJob) to a small frozen summary
(`ftbench_operator.summaries`) and `classify_run` turns the summaries of one attempt into an
`Observation`: the phase, a precise CamelCase
reason, and the trainer's result read from the rank-0 pod's termination message. Keeping this
pure is what lets the unit tests cover every failure mode without a cluster, and makes a
restarted operator reach the same verdict from the same objects (no in-memory history).

Precedence, most specific first: a deleted workload; the rank-0 trainer's own result (it knows
GPU OOM from other errors); the Job's DeadlineExceeded (it kills pods, whose exits would
otherwise read as plain failures); pod-level evidence (host OOM kill, eviction, exit codes);
the workload's own Failed condition; image pulls failing for longer than the grace period;
then Running / Pending. Trials and repeats (several runs in sequence) are `classify_trials`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ftbench.api.status import Phase, TrialOutcome
from ftbench.contracts.outcomes import FINISHED, OUTCOMES, status_reason
from ftbench.contracts.results import EXIT_GPU_OOM, EXIT_NETWORK_UNFIT, Outcome, TrainerResult
from ftbench_operator.reasons import (
    CHILD_DELETED,
    CONTAINER_CONFIG,
    DEADLINE_EXCEEDED,
    EVICTED,
    FAILED_CREATE,
    GPU_OOM,
    HOST_OOM_KILLED,
    IMAGE_PULL,
    NO_PODS,
    NO_RESULT,
    PENDING,
    PENDING_TIMEOUT,
    POD_FAILED,
    QUEUED_REASON,
    ROCE_NOT_IN_EFFECT,
    RUNNING,
    UNSCHEDULABLE,
    WORKLOAD_FAILED,
)
from ftbench_operator.summaries import PodSummary, WorkloadSummary, parse_result, rank_of

# Waiting reasons that never heal by themselves, and ones that may (registry hiccups, a
# ConfigMap that appears late): the latter fail the run only after the grace period.
FATAL_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
PERSISTENT_WAITING = {"ImagePullBackOff": IMAGE_PULL, "ErrImagePull": IMAGE_PULL, CONTAINER_CONFIG: CONTAINER_CONFIG}


@dataclass(frozen=True)
class Observation:
    """The verdict on one attempt. `result` is set for a trainer-reported outcome."""

    phase: Phase
    reason: str
    message: str = ""
    result: TrainerResult | None = None
    start_time: str | None = None
    trials: tuple[TrialOutcome, ...] = ()
    next_trial: int | None = None
    trial_results: tuple[TrainerResult, ...] = ()  # the finished trials' trainer results, in order

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED


def latest_per(pods: Iterable[PodSummary], key: Any) -> dict[Any, PodSummary]:
    """One pod per rank/trial: a replacement pod (a retry by the runtime) supersedes the old one."""
    out: dict[Any, PodSummary] = {}
    for pod in sorted(pods, key=lambda p: (p.created, p.name)):
        out[key(pod)] = pod
    return out


def _elapsed(since: str | None, now: datetime) -> float:
    if not since:
        return 0.0
    try:
        start = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - start).total_seconds()


def pod_failure(pod: PodSummary, rank: int | None = None) -> Observation | None:
    """A terminated or evicted pod's verdict from Kubernetes' own signals (no trainer result)."""
    where = f"pod {pod.name}" + (f" (rank {rank})" if rank else "")
    c = pod.container
    if pod.reason == "Evicted":
        return Observation(Phase.FAILED, EVICTED, f"{where} was evicted: {pod.message}".rstrip(": "))
    if c.state != "terminated" and pod.phase != "Failed":
        return None
    if c.reason == "OOMKilled":
        return Observation(
            Phase.FAILED, HOST_OOM_KILLED, f"{where} was killed by the host's memory limit (OOMKilled, not GPU OOM)"
        )
    if c.exit_code == EXIT_GPU_OOM:
        return Observation(Phase.INVALID, GPU_OOM, f"{where} exited with the trainer's GPU OOM code {EXIT_GPU_OOM}")
    if c.exit_code == EXIT_NETWORK_UNFIT:
        return Observation(
            Phase.INVALID,
            ROCE_NOT_IN_EFFECT,
            f"{where} exited with the trainer's code {EXIT_NETWORK_UNFIT}: spec.run.requireRoce and NCCL used no RoCE",
        )
    if c.exit_code == 0 and c.state == "terminated":
        if rank:  # other ranks finish normally; only rank 0 owes a result
            return None
        return Observation(Phase.FAILED, NO_RESULT, f"{where} exited 0 without a trainer result")
    tail = c.message.strip().splitlines()[-1][:300] if c.message.strip() else ""
    detail = f"exit code {c.exit_code}" if c.exit_code is not None else (pod.reason or "failed")
    return Observation(
        Phase.FAILED,
        POD_FAILED,
        f"{where} failed ({detail}{', ' + c.reason if c.reason else ''})" + (f": {tail}" if tail else ""),
    )


def result_observation(result: TrainerResult, pod: PodSummary) -> Observation:
    """The trainer's own verdict, read through the outcome table: Succeeded with metrics (or, for a
    network check, with the network preflight and no metrics), GPU OOM (a valid measurement) or Failed."""
    start = pod.start_time
    checked_network = result.environment is not None and result.environment.network is not None
    if result.outcome == Outcome.SUCCEEDED and result.metrics is None and not checked_network:
        return Observation(Phase.FAILED, NO_RESULT, "the trainer reported success without metrics", result, start)
    rule = OUTCOMES[result.outcome]
    error = f"{result.error.type}: {result.error.message}" if result.error else ""
    reason = status_reason(result.outcome, result.reason)
    return Observation(rule.phase, reason, error or rule.default_message, result, start)


def waiting_failure(pods: Iterable[PodSummary], now: datetime, grace_seconds: float) -> Observation | None:
    for pod in pods:
        c = pod.container
        if c.state != "waiting":
            continue
        if c.reason in FATAL_WAITING:
            return Observation(Phase.FAILED, IMAGE_PULL, f"pod {pod.name}: {c.reason}: {c.message}".rstrip(": "))
        reason = PERSISTENT_WAITING.get(c.reason)
        waited = _elapsed(pod.start_time or pod.created, now)
        if reason and waited >= grace_seconds:
            return Observation(
                Phase.FAILED, reason, f"pod {pod.name}: {c.reason} for {waited:.0f}s: {c.message}".rstrip(": ")
            )
    return None


def run_progress(pods: Iterable[PodSummary], workloads: Iterable[WorkloadSummary] = ()) -> Observation:
    """Running once a pod runs; else Pending, with reason Suspended while a workload is queued."""
    pods = list(pods)
    running = [p for p in pods if p.phase == "Running" or p.container.state in ("running", "terminated")]
    starts = sorted(p.start_time for p in running if p.start_time)
    if running:
        return Observation(
            Phase.RUNNING,
            RUNNING,
            f"{len(running)} of {len(pods)} pods running",
            start_time=starts[0] if starts else None,
        )
    suspended = [w for w in workloads if w.suspended]
    if suspended:
        w = suspended[0]
        return Observation(
            Phase.PENDING, QUEUED_REASON, f"{w.kind} {w.name} is suspended: queued until Kueue admits it"
        )
    return _why_pending(pods)


def _why_pending(pods: list[PodSummary]) -> Observation:
    """Pending, with the most telling reason the pods show now (reported at once, not at the deadline)."""
    if not pods:
        return Observation(
            Phase.PENDING, NO_PODS, "no pod created yet (the workload's events say why, e.g. FailedCreate)"
        )
    for pod in pods:
        if pod.unschedulable:
            return Observation(Phase.PENDING, UNSCHEDULABLE, f"pod {pod.name} cannot be scheduled: {pod.unschedulable}")
    for pod in pods:
        c = pod.container
        if c.state == "waiting" and c.reason:
            return Observation(Phase.PENDING, c.reason, f"pod {pod.name}: {c.reason}: {c.message}".rstrip(": "))
    return Observation(Phase.PENDING, PENDING, "waiting for pods to start")


def explain_no_pods(obs: Observation, failed_create: Iterable[Mapping[str, Any]]) -> Observation:
    """`obs`, or, while no pod exists, the newest FailedCreate Event of the workload: the API
    server's own words ("serviceaccount X not found", "exceeded quota") instead of a guess."""
    if obs.phase != Phase.PENDING or obs.reason != NO_PODS:
        return obs
    events = sorted(failed_create, key=_event_time)
    if not events:
        return obs
    newest = events[-1]
    involved = newest.get("involvedObject") or {}
    message = (
        f"{involved.get('kind', 'workload')} {involved.get('name', '')} cannot create pods: {newest.get('message')}"
    )
    return Observation(Phase.PENDING, FAILED_CREATE, message, trials=obs.trials)


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def pending_too_long(
    obs: Observation, workloads: Iterable[WorkloadSummary], now: datetime, deadline_seconds: float | None
) -> Observation:
    """`obs`, or Failed with its reason once the run has been Pending past the profile's deadline."""
    if obs.phase != Phase.PENDING or deadline_seconds is None:
        return obs
    since = min((w.created for w in workloads if w.created), default="")
    waited = _elapsed(since, now)
    if waited < deadline_seconds:
        return obs
    message = f"still pending {waited:.0f}s after the workload was created ({obs.reason}): {obs.message}"
    return Observation(Phase.FAILED, PENDING_TIMEOUT, message, trials=obs.trials)


def classify_run(
    workloads: Iterable[WorkloadSummary],
    pods: Iterable[PodSummary],
    *,
    workload_missing: bool,
    now: datetime,
    image_pull_grace_seconds: float = 300.0,
) -> Observation:
    """One run (one trial), any number of nodes. See the module docstring for the precedence."""
    if workload_missing:
        return Observation(Phase.FAILED, CHILD_DELETED, "the run's workload was deleted by hand; retry to run again")
    live = [p for p in pods if not p.deleting or p.container.state == "terminated"]
    by_rank = latest_per(live, lambda p: rank_of(p, 1))
    rank0 = by_rank.get(0)
    if rank0 is not None and rank0.container.state == "terminated":
        result = parse_result(rank0.container.message)
        if result is not None:
            return result_observation(result, rank0)
    workloads = list(workloads)
    failed = [w for w in workloads if w.failed]
    if any(w.reason == DEADLINE_EXCEEDED for w in failed):
        w = next(w for w in failed if w.reason == DEADLINE_EXCEEDED)
        return Observation(
            Phase.FAILED, DEADLINE_EXCEEDED, f"{w.kind} {w.name}: {w.message or 'activeDeadlineSeconds reached'}"
        )
    for rank, pod in sorted(by_rank.items()):
        verdict = pod_failure(pod, rank)
        if verdict is not None:
            return verdict
    if failed:
        w = failed[0]
        if w.reason == "PodFailurePolicy":
            return Observation(Phase.INVALID, GPU_OOM, f"{w.kind} {w.name}: {w.message}")
        return Observation(
            Phase.FAILED, w.reason or WORKLOAD_FAILED, f"{w.kind} {w.name} failed: {w.message}".rstrip(": ")
        )
    waiting = waiting_failure(by_rank.values(), now, image_pull_grace_seconds)
    if waiting is not None:
        return waiting
    if any(w.succeeded for w in workloads):
        return Observation(Phase.FAILED, NO_RESULT, "the workload completed but the rank-0 pod left no trainer result")
    return run_progress(by_rank.values(), workloads)
