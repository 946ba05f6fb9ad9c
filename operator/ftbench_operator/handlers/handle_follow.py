"""Follow a running attempt: children -> `classify` -> status. Runs from child events.

Pod, Job, PyTorchJob and TrainJob events only *request* a sync of their experiment, through a
`syncer.Syncer`: requests for an experiment that is already syncing are coalesced into one more
pass, and a failed pass is retried with backoff (kopf does not retry event handlers, and a lost
sync would leave a finished run Running). `sync_locked` is one pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ftbench.api import effective
from ftbench.api.fabric import uses_roce
from ftbench.api.network import NetworkExpectation
from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import Phase
from ftbench.catalog import load_catalog
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import label_value
from ftbench.render.registry import workload_kind
from ftbench_operator import children, status
from ftbench_operator.body import ExperimentView
from ftbench_operator.classify import Observation, classify_run, explain_no_pods, pending_too_long
from ftbench_operator.classify_trials import classify_trials
from ftbench_operator.context import OperatorContext, event
from ftbench_operator.reasons import CHILD_CONFLICT, FAILED_CREATE, NO_PODS, UNKNOWN_WORKLOAD, UNREADABLE_SPEC
from ftbench_operator.summaries import PodSummary, summarize_pod, summarize_workload
from ftbench_operator.writer import Announce, write_status

log = logging.getLogger(__name__)
NO_PODS_RECHECK_SECONDS = 10.0


def pod_index_key(namespace: str, experiment_label: str, attempt: str) -> tuple[str, str, str]:
    return (namespace, experiment_label, attempt)


@dataclass(frozen=True)
class FollowedSpec:
    """The accepted spec as one sync pass reads it: parsed once and passed on (the trial count, the
    repeats' rule, the network expectation, a next trial's render)."""

    spec: FineTuneExperimentSpec
    trials: int
    repeated: bool  # the trials are spec.repeats (their worst outcome is the experiment's), not stability trials

    @property
    def precision(self) -> float | None:
        """The interval across repeats that ends them early (spec.targetPrecisionPercent), repeats only."""
        return effective.precision_target(self.spec) if self.repeated else None

    @classmethod
    def of(cls, experiment: ExperimentView) -> FollowedSpec:
        """Raises `UnreadableSpec` where status.acceptedSpec no longer reads as a spec of this operator."""
        recorded, _ = experiment.accepted_spec()
        try:
            spec = FineTuneExperimentSpec.model_validate(recorded)
            catalog = load_catalog()
            return cls(spec, effective.trials(spec, catalog), effective.is_repeated(spec, catalog))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UnreadableSpec(f"{where}: {first['msg']}") from err
        except KeyError as err:  # the catalog no longer has the experiment it ran
            raise UnreadableSpec(f"experiment {err.args[0]!r} is not in this operator's catalog") from err

    def network(self, profile: ClusterProfile) -> NetworkExpectation:
        """What the network preflight should show: RoCE on a multi-node enableRoce run, the profile's busbw."""
        return NetworkExpectation(
            roce=uses_roce(self.spec, profile), bus_bandwidth_gbps=profile.expected_bus_bandwidth_gbps
        )


class UnreadableSpec(ValueError):
    """status.acceptedSpec does not parse with this operator's API (an upgrade that tightened a
    field, or a status edited by hand): the run cannot be followed, and the experiment says so."""

    def message(self) -> str:
        return (
            f"status.acceptedSpec no longer reads as a FineTuneExperiment spec of this operator ({self}), so this "
            "attempt cannot be followed; its children are left as they are. Delete the experiment and create it "
            "again with that field fixed (a spec cannot be edited, and a retry runs the accepted spec)"
        )


async def sync_locked(ctx: OperatorContext, namespace: str, name: str) -> None:
    """`sync_once` under the experiment's lock: change handlers write the same status."""
    async with ctx.lock(namespace, name):
        await sync_once(ctx, namespace, name)


def observe(
    ctx: OperatorContext,
    experiment: ExperimentView,
    workload_bodies: Sequence[Mapping[str, Any]],
    pods: list[PodSummary],
    trials: int,
    failed_create: Sequence[Mapping[str, Any]] | None = None,
    repeated: bool = False,
    precision: float | None = None,
) -> Observation:
    """Classify one attempt from its workloads, pods and the workloads' FailedCreate Events
    (pure apart from the clock)."""
    job_kind, job_name = (experiment.job.kind, experiment.job.name) if experiment.job else ("", None)
    # Only children this experiment owns count: anyone may create objects with its labels.
    owned = [w for w in workload_bodies if children.owned_by(w, experiment.uid)]
    owner_uids = {str((w.get("metadata") or {}).get("uid")) for w in owned}
    # A TrainJob's pods belong to Jobs of its JobSet (named as the TrainJob), not to the TrainJob itself.
    kind = workload_kind(experiment.job.api_version, job_kind) if experiment.job else None
    via_jobset = kind is not None and kind.pods_via_jobset
    jobsets = {str((w.get("metadata") or {}).get("name")) for w in owned} if via_jobset else set()
    pods = [p for p in pods if p.owner_uid in owner_uids or (p.jobset and p.jobset in jobsets)]
    workloads = [summarize_workload(w, job_kind) for w in owned]
    missing = job_name not in {w.name for w in workloads}
    now = status.utcnow()
    grace = ctx.settings.image_pull_grace_seconds
    deadline = ctx.profiles.current().pending_deadline_seconds
    if trials > 1:
        per_trial = any(w.trial_label is not None for w in workloads)
        obs = classify_trials(
            workloads,
            pods,
            trials=trials,
            workload_missing=missing,
            one_job_per_trial=per_trial,
            now=now,
            image_pull_grace_seconds=grace,
            repeated=repeated,
            precision=precision,
        )
        if obs.trials:
            return obs
    else:
        obs = classify_run(workloads, pods, workload_missing=missing, now=now, image_pull_grace_seconds=grace)
    return pending_too_long(explain_no_pods(obs, failed_create or []), workloads, now, deadline)


async def sync_once(ctx: OperatorContext, namespace: str, name: str, experiment: ExperimentView | None = None) -> None:
    """Bring one experiment's status up to date with its children. Caller holds the lock."""
    if experiment is None:
        found = await ctx.kube.get_experiment(namespace, name)
        experiment = None if found is None else ExperimentView.parse(found)
    if experiment is None or experiment.deleting:
        return
    job = experiment.job
    if experiment.finished or job is None:
        return
    attempt = experiment.attempt
    if workload_kind(job.api_version, job.kind) is None:  # status is schema-checked, not trusted
        message = f"status.job names {job.to_wire()!r}, not a workload ftbench creates"
        await _record(ctx, experiment, Observation(Phase.FAILED, UNKNOWN_WORKLOAD, message))
        return
    try:
        followed = FollowedSpec.of(experiment)
    except UnreadableSpec as err:
        await _record(ctx, experiment, Observation(Phase.FAILED, UNREADABLE_SPEC, err.message()))
        return
    trials, repeated, precision = followed.trials, followed.repeated, followed.precision
    selector = children.attempt_selector(name, attempt)
    workloads = await ctx.kube.list(job.api_version, job.kind, namespace, selector)
    index: Mapping[Any, Any] = ctx.pods or {}
    pods = list(index.get(pod_index_key(namespace, label_value(name), str(attempt)), ()))
    failed_create = await _failed_create(ctx, experiment, workloads) if not pods else []
    obs = observe(ctx, experiment, workloads, pods, trials, failed_create, repeated, precision)
    if obs.finished:
        # A verdict is final, so it is made on what the API server holds: the Job's watch can be
        # ahead of the pods' (a completed Job seen before its pod's termination message).
        listed = await ctx.kube.list("v1", "Pod", namespace, selector)
        pods = [summarize_pod(p) for p in listed]
        obs = observe(ctx, experiment, workloads, pods, trials, failed_create, repeated, precision)
    log.debug(
        "sync %s/%s: %d workloads, %d pods -> %s (%s)",
        namespace,
        name,
        len(workloads),
        len(pods),
        obs.phase,
        obs.reason,
    )
    if obs.next_trial is not None:
        try:
            await start_trial(ctx, experiment, followed.spec, attempt, obs.next_trial)
        except children.ChildConflict as err:
            obs = Observation(Phase.FAILED, CHILD_CONFLICT, str(err), trials=obs.trials)
    deadline = ctx.profiles.current().pending_deadline_seconds
    if obs.reason == NO_PODS and ctx.request_sync_later is not None:
        # A FailedCreate Event changes no watched object: look again soon (the deadline included).
        ctx.request_sync_later(namespace, name, NO_PODS_RECHECK_SECONDS)
    elif obs.phase == Phase.PENDING and deadline is not None and ctx.request_sync_later is not None:
        ctx.request_sync_later(namespace, name, float(deadline) + 1.0)
    await _record(ctx, experiment, obs, followed)


async def _failed_create(ctx: OperatorContext, experiment: ExperimentView, workloads: list[Obj]) -> list[Obj]:
    """FailedCreate Events of this experiment's workloads: why their controller made no pod
    (quota, admission). Matched by uid: an earlier object of the same name left its own Events."""
    found: list[Obj] = []
    for workload in workloads:
        meta = workload["metadata"]
        if children.owned_by(workload, experiment.uid):
            events = await ctx.kube.events(experiment.namespace, meta["name"], FAILED_CREATE)
            found += [e for e in events if (e.get("involvedObject") or {}).get("uid") == meta.get("uid")]
    return found


async def _record(
    ctx: OperatorContext, experiment: ExperimentView, obs: Observation, followed: FollowedSpec | None = None
) -> None:
    """Write the status for `obs` and, on a phase change, its Event (`followed`: None where the spec
    could not be read, so the run was not followed)."""
    builder = status.StatusBuilder(experiment.status, experiment.generation, status.utcnow())
    failed = obs.phase in (Phase.FAILED, Phase.INVALID)
    announce = Announce(obs.reason, f"{obs.phase.value}: {obs.message}", warning=failed, when="phase")
    profile = ctx.profiles.current()
    network = followed.network(profile) if followed else NetworkExpectation(False, profile.expected_bus_bandwidth_gbps)
    trials, repeated = (followed.trials, followed.repeated) if followed else (1, False)
    precision = followed.precision if followed else None
    desired = builder.observed(obs, trials=trials, repeated=repeated, precision=precision, network=network)
    await write_status(ctx, experiment, desired, announce)


async def start_trial(
    ctx: OperatorContext, experiment: ExperimentView, spec: FineTuneExperimentSpec, attempt: int, trial: int
) -> None:
    """One Job per trial: create trial `trial`'s Job now that the previous trial finished."""
    owner = experiment.body
    rendered = children.render(owner, spec, ctx.profiles.current(), attempt)
    obj = children.trial_object(rendered, trial)
    if obj is None:
        return
    try:
        await children.create_all(ctx.kube, [obj], owner)
    except children.OwnerGone as err:
        log.info("%s/%s: trial %d not started: %s", experiment.namespace, experiment.name, trial, err)
        return
    event(experiment, "TrialStarted", f"trial {trial} of attempt {attempt} created")
