"""What happened to a run, decided from the children alone: pure functions, no API calls.

The operator reduces every Pod and workload (Job / PyTorchJob) to a small frozen summary
(`summarize_pod`, `summarize_workload`; the pod summaries live in a kopf index) and `classify`
turns the summaries of one attempt into an `Observation`: the phase, a precise CamelCase
reason, and the trainer's result read from the rank-0 pod's termination message. Keeping this
pure is what lets the unit tests cover every failure mode without a cluster, and makes a
restarted operator reach the same verdict from the same objects (no in-memory history).

Precedence, most specific first: a deleted workload; the rank-0 trainer's own result (it knows
GPU OOM from other errors); the Job's DeadlineExceeded (it kills pods, whose exits would
otherwise read as plain failures); pod-level evidence (host OOM kill, eviction, exit codes);
the workload's own Failed condition; image pulls failing for longer than the grace period;
then Running / Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ftbench.api import stability
from ftbench.api.repeats import combined_result
from ftbench.api.status import Phase, TrialOutcome
from ftbench.contracts.env import JOB_COMPLETION_INDEX_ANNOTATION
from ftbench.contracts.labels import TRIAL_LABEL
from ftbench.contracts.outcomes import FINISHED, OUTCOMES, status_reason
from ftbench.contracts.results import EXIT_GPU_OOM, Outcome, TrainerResult
from ftbench.render.trainjob import JOBSET_NAME_LABEL

# Reasons (CamelCase, as in metav1.Condition) the operator writes; docs and tests use these names.
# Those of a trainer-reported outcome come from the outcome table.
RESULTS_RECORDED = OUTCOMES[Outcome.SUCCEEDED].status_reason
GPU_OOM = OUTCOMES[Outcome.GPU_OOM].status_reason
TRAINING_ERROR = OUTCOMES[Outcome.FAILED].status_reason
INVALID_SPEC = "InvalidSpec"
NOT_RUNNABLE = "NotRunnable"
HOST_OOM_KILLED = "OOMKilled"
EVICTED = "Evicted"
IMAGE_PULL = "ImagePullBackOff"
CONTAINER_CONFIG = "CreateContainerConfigError"
DEADLINE_EXCEEDED = "DeadlineExceeded"
CHILD_DELETED = "ChildDeleted"
CHILD_REJECTED = "ChildRejected"
CHILD_CONFLICT = "ChildConflict"
# A child name is still held by the children of a deleted experiment of the same name.
WAITING_FOR_PREDECESSOR = "WaitingForPredecessor"
UNKNOWN_WORKLOAD = "UnknownWorkload"
MISSING_DEPENDENCY = "MissingDependency"
BACKOFF_LIMIT = "BackoffLimitExceeded"
POD_FAILED = "PodFailed"
NO_RESULT = "NoResult"
WORKLOAD_FAILED = "WorkloadFailed"
PENDING = "Pending"
NO_PODS = "NoPods"
FAILED_CREATE = "FailedCreate"  # the Job controller's Event reason when the API server refuses a pod
UNSCHEDULABLE = "Unschedulable"
PENDING_TIMEOUT = "PendingTimeout"
RUNNING = "Running"
QUEUED_REASON = "Suspended"
TRIALS_COMPLETED = "TrialsCompleted"
REPEATS_COMPLETED = "RepeatsCompleted"

PYTORCH_REPLICA_TYPE = "training.kubeflow.org/replica-type"
PYTORCH_REPLICA_INDEX = "training.kubeflow.org/replica-index"
TRAINER_CONTAINERS = ("trainer", "pytorch")
# Waiting reasons that never heal by themselves, and ones that may (registry hiccups, a
# ConfigMap that appears late): the latter fail the run only after the grace period.
FATAL_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
PERSISTENT_WAITING = {"ImagePullBackOff": IMAGE_PULL, "ErrImagePull": IMAGE_PULL, CONTAINER_CONFIG: CONTAINER_CONFIG}


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
    """Job/TrainJob: Complete/Failed conditions. PyTorchJob: the Succeeded/Failed condition that is
    True. Suspended: spec.suspend (set at creation for Kueue, cleared on admission) or a True
    Suspended condition."""
    meta = body.get("metadata") or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    true = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    failed = true.get("Failed")
    return WorkloadSummary(
        kind=str(body.get("kind") or kind),  # items of a LIST response carry no kind
        name=str(meta.get("name", "")),
        suspended=bool((body.get("spec") or {}).get("suspend")) or "Suspended" in true,
        succeeded="Complete" in true or "Succeeded" in true,
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


def _latest_per(pods: Iterable[PodSummary], key: Any) -> dict[Any, PodSummary]:
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
    """The trainer's own verdict, read through the outcome table: Succeeded with metrics, GPU OOM
    (a valid measurement) or Failed."""
    start = pod.start_time
    if result.outcome == Outcome.SUCCEEDED and result.metrics is None:
        return Observation(Phase.FAILED, NO_RESULT, "the trainer reported success without metrics", result, start)
    rule = OUTCOMES[result.outcome]
    error = f"{result.error.type}: {result.error.message}" if result.error else ""
    reason = status_reason(result.outcome, result.reason)
    return Observation(rule.phase, reason, error or rule.default_message, result, start)


def _waiting_failure(pods: Iterable[PodSummary], now: datetime, grace_seconds: float) -> Observation | None:
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


def _progress(pods: Iterable[PodSummary], workloads: Iterable[WorkloadSummary] = ()) -> Observation:
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
    by_rank = _latest_per(live, lambda p: rank_of(p, 1))
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
    waiting = _waiting_failure(by_rank.values(), now, image_pull_grace_seconds)
    if waiting is not None:
        return waiting
    if any(w.succeeded for w in workloads):
        return Observation(Phase.FAILED, NO_RESULT, "the workload completed but the rank-0 pod left no trainer result")
    return _progress(by_rank.values(), workloads)


def trial_result(pod: PodSummary) -> TrainerResult | None:
    """The trainer's result a finished trial pod left (None while it runs, or when it left none)."""
    return parse_result(pod.container.message) if pod.container.state == "terminated" else None


def trial_outcome(pod: PodSummary, index: int, result: TrainerResult | None) -> TrialOutcome | None:
    """A finished trial's outcome (None while the trial pod runs): the trainer's `result` if it left
    one (`trial_result`), else what Kubernetes says of the pod."""
    if result is not None:
        return stability.trial_outcome(index, result)
    verdict = pod_failure(pod)
    if verdict is None:
        return None
    outcome = Outcome.GPU_OOM if verdict.phase == Phase.INVALID else Outcome.FAILED
    return stability.trial(index, outcome, verdict.reason, verdict.message)


def repeats_verdict(
    done: tuple[TrialOutcome, ...], results: tuple[TrainerResult, ...], start: str | None
) -> Observation:
    """Every repeat ended: the first that ran out of GPU memory makes the experiment Invalid (the
    configuration does not fit), else the first that failed makes it Failed, else it succeeded with
    the mean over the repeats (api.repeats)."""
    for outcome in (Outcome.GPU_OOM, Outcome.FAILED):
        if bad := next((t for t in done if t.outcome == outcome), None):
            phase = OUTCOMES[outcome].phase
            message = f"repeat {bad.index} of {len(done)}: {bad.message}".rstrip(": ")
            return Observation(phase, bad.reason, message, start_time=start, trials=done, trial_results=results)
    return Observation(
        Phase.SUCCEEDED,
        REPEATS_COMPLETED,
        f"{len(done)} repeats finished",
        result=combined_result(results) if results else None,
        start_time=start,
        trials=done,
        trial_results=results,
    )


def classify_trials(
    workloads: Iterable[WorkloadSummary],
    pods: Iterable[PodSummary],
    *,
    trials: int,
    workload_missing: bool,
    one_job_per_trial: bool,
    now: datetime,
    image_pull_grace_seconds: float = 300.0,
    repeated: bool = False,
) -> Observation:
    """`trials` sequential single-node runs, aggregated as they finish: the stability experiment's
    trials, or with `repeated` an experiment's repeats.

    A trial that fails is a measurement, not the end of the experiment; repeats end as their worst
    outcome (`repeats_verdict`). With one Job per trial (clusters without Indexed Jobs) `next_trial`
    tells the caller which Job to create next.
    """
    if workload_missing:
        return Observation(Phase.FAILED, CHILD_DELETED, "a trial workload was deleted by hand; retry to run again")
    live = [p for p in pods if trial_of(p) is not None and (not p.deleting or p.container.state == "terminated")]
    by_trial = _latest_per(live, trial_of)
    parsed = {i: trial_result(pod) for i, pod in sorted(by_trial.items()) if i < trials}  # each message once
    done = tuple(outcome for i, r in parsed.items() if (outcome := trial_outcome(by_trial[i], i, r)) is not None)
    start = min((p.start_time for p in by_trial.values() if p.start_time), default=None)
    results = tuple(r for r in parsed.values() if r is not None)
    if len(done) >= trials:
        if repeated:
            return repeats_verdict(done, results, start)
        return Observation(
            Phase.SUCCEEDED,
            TRIALS_COMPLETED,
            f"{trials} trials finished",
            start_time=start,
            trials=done,
            trial_results=results,
        )
    workloads = list(workloads)
    if one_job_per_trial:
        created = {w.trial_label for w in workloads}
        finished = {t.index for t in done}
        if created <= finished and (nxt := len(created)) < trials:
            return Observation(
                Phase.RUNNING,
                RUNNING,
                f"{len(done)} of {trials} trials finished",
                start_time=start,
                trials=done,
                next_trial=nxt,
                trial_results=results,
            )
    elif any(w.failed for w in workloads) and not any(
        p.container.state in ("", "waiting", "running") for p in by_trial.values()
    ):
        w = next(w for w in workloads if w.failed)
        return Observation(
            Phase.FAILED,
            w.reason or WORKLOAD_FAILED,
            f"{w.kind} {w.name} stopped after {len(done)} of {trials} trials: {w.message}".rstrip(": "),
            start_time=start,
            trials=done,
        )
    waiting = _waiting_failure(by_trial.values(), now, image_pull_grace_seconds)
    if waiting is not None:
        return Observation(waiting.phase, waiting.reason, waiting.message, start_time=start, trials=done)
    progress = _progress(by_trial.values(), workloads)
    if done and progress.phase == Phase.PENDING:
        progress = Observation(Phase.RUNNING, RUNNING, "between trials")
    return Observation(
        progress.phase,
        progress.reason,
        f"{len(done)} of {trials} trials finished",
        start_time=start or progress.start_time,
        trials=done,
        trial_results=results,
    )
