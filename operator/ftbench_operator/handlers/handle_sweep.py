"""The FineTuneSweep controller: observe the children, let `ftbench.sweep` decide, create, record.

One reconcile pass (`reconcile_sweep`) runs for a sweep's own events and for every event of one of
its child FineTuneExperiments, through a `Syncer` (coalesced: a burst of child updates costs one
or two passes; retried with backoff on API errors). A pass keeps no state of its own; it creates
runs *before* it writes the status, with deterministic names, so an operator killed in between
neither duplicates a run nor loses a count. No finalizer; the spec is immutable, and every pass
after the first plans from `status.acceptedSpec`.

Design notes: docs/design-notes.md, "operator/ftbench_operator/handlers/handle_sweep.py".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from pydantic import ValidationError

from ftbench.api.network import status_network
from ftbench.api.prediction_report import status_predicted_fits, status_predicted_percent
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.resource import API_VERSION, KIND, SWEEP_KIND
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import FineTuneSweepSpec, FineTuneSweepStatus, SweepPhase
from ftbench.api.validation import Issue
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import MANAGED_BY, SWEEP_LABEL, SWEEP_POINT_LABEL, SWEEP_REPEAT_LABEL, label_value
from ftbench.contracts.outcomes import Phase
from ftbench.contracts.results import Metrics
from ftbench.render.names import sweep_child_name
from ftbench.sweep.cost import observed_fits, sweep_cost
from ftbench.sweep.points import SweepPoint, expand, launch_wire
from ftbench.sweep.schedule import NewRun, ReuseCandidate, RunState, SweepPlan, plan_sweep, reuse_key
from ftbench.sweep.status import invalid_status, sweep_status
from ftbench_operator import children, status
from ftbench_operator.body import ExperimentView
from ftbench_operator.context import OperatorContext, event
from ftbench_operator.kube import EXPERIMENT_API_VERSION

log = logging.getLogger(__name__)
SUCCEEDED_CONDITION = "Succeeded"
CHILD_CONFLICT = "ChildConflict"
FIRST_GENERATION = 1


def child_selector(sweep: str) -> str:
    """The label selector of a sweep's children (the name cut to a label value, as on the children)."""
    return f"{SWEEP_LABEL}={label_value(sweep)}"


def sweep_owner(body: Mapping[str, Any]) -> str | None:
    """The name of the FineTuneSweep that controls this experiment, from its owner references
    (a child event asks for a pass of that sweep; the pass itself checks the uid)."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == SWEEP_KIND and ref.get("apiVersion") == API_VERSION and ref.get("controller"):
            return str(ref.get("name"))
    return None


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def run_state(body: Mapping[str, Any]) -> RunState | None:
    """One child as `plan_sweep` reads it; None when its point/repeat labels do not parse.

    The reason is the Succeeded condition's (a GPU OOM child says `GpuOutOfMemory` there, which is
    what the pruning rule looks for), else the first word of invalidReason."""
    child = ExperimentView.parse(body)
    labels = (body.get("metadata") or {}).get("labels") or {}
    point, repeat = _label_int(labels, SWEEP_POINT_LABEL), _label_int(labels, SWEEP_REPEAT_LABEL)
    if point is None or repeat is None:
        return None
    condition = status.condition(child.status, SUCCEEDED_CONDITION) or {}
    reason = str(condition.get("reason") or child.invalid_reason.split(":", 1)[0])
    return RunState(
        name=child.name,
        point=point,
        repeat=repeat,
        phase=child.phase,
        reason=reason if child.finished else "",
        message=str(child.status.get("message") or ""),
        metrics=_metrics(child.status) if child.phase == Phase.SUCCEEDED else None,
        network=status_network(child.status),
        predicted_memory_percent=status_predicted_percent(child.status),
        predicted_fits=status_predicted_fits(child.status),
    )


def _metrics(current: Mapping[str, Any]) -> Metrics | None:
    results = current.get("results")
    if not isinstance(results, Mapping):
        return None
    try:
        return Metrics.model_validate(results)
    except ValidationError:  # schema-checked by the CRD, not trusted
        return None


def point_image(profile: ClusterProfile, spec: FineTuneExperimentSpec) -> str:
    """The trainer image a point would run here (what a reused result must have run too)."""
    return profile.images.image_for(spec.engine, spec.fms_hf_tuning_version)


def reuse_candidates(
    points: Sequence[SweepPoint], experiments: Sequence[Mapping[str, Any]], profile: ClusterProfile, sweep_uid: str
) -> dict[int, ReuseCandidate]:
    """Points whose effective spec and image equal a finished Succeeded experiment's (not one of
    this sweep's own children: those are its runs). The most recently completed one wins."""
    found: dict[str, tuple[str, str, Metrics]] = {}
    for body in experiments:
        exp = ExperimentView.parse(body)
        accepted = exp.status.get("acceptedSpec")
        image = (exp.status.get("environment") or {}).get("image")
        metrics = _metrics(exp.status)
        if exp.phase != Phase.SUCCEEDED or children.owned_by(body, sweep_uid) or metrics is None:
            continue
        if not isinstance(accepted, Mapping) or not image:
            continue
        try:
            key = reuse_key(FineTuneExperimentSpec.model_validate(dict(accepted)), str(image))
        except ValidationError:
            continue
        completed = str(exp.status.get("completionTime") or "")
        if key not in found or (completed, exp.name) > found[key][:2]:
            found[key] = (completed, exp.name, metrics)
    reuse = {}
    for point in points:
        if point.valid and point.spec is not None:
            match = found.get(reuse_key(point.spec, point_image(profile, point.spec)))
            if match is not None:
                reuse[point.index] = ReuseCandidate(name=match[1], metrics=match[2])
    return reuse


def child_body(sweep: Mapping[str, Any], spec: FineTuneSweepSpec, run: NewRun) -> Obj:
    """The child FineTuneExperiment: the point's spec, labelled with sweep/point/repeat, controlled
    by the sweep (owner reference with controller and blockOwnerDeletion: the garbage collector
    deletes it with the sweep)."""
    meta = sweep["metadata"]
    body: Obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": sweep_child_name(meta["name"], run.point.index, run.repeat),
            "namespace": meta["namespace"],
            "labels": {
                **MANAGED_BY,
                SWEEP_LABEL: label_value(meta["name"]),
                SWEEP_POINT_LABEL: str(run.point.index),
                SWEEP_REPEAT_LABEL: str(run.repeat),
            },
        },
        "spec": launch_wire(spec, run.point),
    }
    kopf.adopt(body, owner=dict(sweep))  # type: ignore[arg-type]  # kopf takes any mapping
    return body


def _schema_issues(err: ValidationError) -> list[Issue]:
    return [
        Issue("spec." + ".".join(str(p) for p in e["loc"]), e.get("input"), "sweep.schema", e["msg"])
        for e in err.errors()
    ]


def _previous(current: Mapping[str, Any]) -> FineTuneSweepStatus | None:
    try:
        return FineTuneSweepStatus.model_validate(dict(current)) if current else None
    except ValidationError:
        return None


async def reconcile_sweep(ctx: OperatorContext, namespace: str, name: str) -> None:
    """One pass for sweep `namespace/name` (see the module docstring). Runs from the sweep's
    Syncer, so passes of one sweep never overlap."""
    sweep = await ctx.kube.get_experiment(namespace, name, SWEEP_KIND)
    if sweep is None or (sweep.get("metadata") or {}).get("deletionTimestamp"):
        return
    meta, current = sweep["metadata"], sweep.get("status") or {}
    generation = int(meta.get("generation") or FIRST_GENERATION)
    previous, now = _previous(current), status.utcnow()
    if previous is not None and previous.accepted_spec is not None:
        spec, accepted_generation = previous.accepted_spec, previous.accepted_generation or FIRST_GENERATION
    else:
        try:
            spec, accepted_generation = FineTuneSweepSpec.model_validate(sweep.get("spec") or {}), generation
        except ValidationError as err:
            desired = invalid_status(_schema_issues(err), generation=generation, previous=previous, now=now)
            await _write(ctx, sweep, desired)
            return
    profile = ctx.profiles.current()
    expansion = expand(spec, catalog_for(profile))
    if not expansion.ok:
        desired = invalid_status(expansion.issues, generation=generation, previous=previous, now=now)
        await _write(ctx, sweep, desired)
        return
    listed = await ctx.kube.list(EXPERIMENT_API_VERSION, KIND, namespace, child_selector(name))
    owned = [c for c in listed if children.owned_by(c, meta["uid"])]
    runs = [r for r in map(run_state, owned) if r is not None]
    reuse: dict[int, ReuseCandidate] = {}
    if spec.reuse:
        others = await ctx.kube.list(EXPERIMENT_API_VERSION, KIND, namespace, "")
        reuse = reuse_candidates(expansion.points, others, profile, meta["uid"])
    plan = await _start_runs(ctx, sweep, spec, expansion.points, runs, reuse)
    cost = sweep_cost(expansion.points, catalog_for(profile), observed_fits(plan.rows, runs))
    desired = sweep_status(plan, generation=generation, previous=previous, now=now, started=bool(runs),
                           accepted=(spec, accepted_generation), cost=cost)  # fmt: skip
    await _write(ctx, sweep, desired)


async def _start_runs(
    ctx: OperatorContext,
    sweep: Mapping[str, Any],
    spec: FineTuneSweepSpec,
    points: Sequence[SweepPoint],
    runs: list[RunState],
    reuse: Mapping[int, ReuseCandidate],
) -> SweepPlan:
    """Create what the plan asks for, then plan again with the new runs observed (so the table
    says Running for them). A name taken by an object the sweep does not own is never adopted:
    that run is Failed with reason ChildConflict, and the sweep goes on with the rest. `runs`
    grows in place: the caller's `started` reads it."""
    plan = plan_sweep(spec, points, runs, reuse)
    while plan.to_create:
        for run in plan.to_create:
            body = child_body(sweep, spec, run)
            child = body["metadata"]["name"]
            try:
                created = await children.create_all(ctx.kube, [body], sweep)
            except children.PredecessorChild as err:
                # A deleted sweep of this name still owns that child: its deletion event brings the
                # next pass, which creates the run then. Counted as started so nothing else jumps in.
                log.info("sweep %s: %s", sweep["metadata"]["name"], err)
                runs.append(RunState(child, run.point.index, run.repeat, message=str(err)))
                continue
            except children.ChildConflict as err:
                log.warning("sweep %s: %s", sweep["metadata"]["name"], err)
                runs.append(RunState(child, run.point.index, run.repeat, Phase.FAILED, CHILD_CONFLICT, str(err)))
                continue
            runs.append(RunState(child, run.point.index, run.repeat))
            if created:
                event(sweep, "ChildCreated", f"point {run.point.index} repeat {run.repeat}: created {child}")
        plan = plan_sweep(spec, points, runs, reuse)
    return plan


async def _write(ctx: OperatorContext, sweep: Mapping[str, Any], desired: FineTuneSweepStatus) -> None:
    """Merge-patch the status when it differs from the stored one (absent fields set to null)."""
    meta, current = sweep["metadata"], sweep.get("status") or {}
    wire = status.strip_empty(desired.to_wire())  # 1.20's merge patch would make "" a null the schema refuses
    if wire == current:
        return
    patch: Obj = {**dict.fromkeys(current), **wire}
    # By uid: a pass of a sweep deleted and re-created at once must not write onto the new one.
    written = await ctx.kube.patch_experiment_status(
        meta["namespace"], meta["name"], patch, SWEEP_KIND, uid=meta["uid"]
    )
    if written is not None:
        ctx.own_writes[(meta["namespace"], meta["name"])] = str(written["metadata"].get("resourceVersion"))
    log.info("sweep %s/%s: %s %s", meta["namespace"], meta["name"], desired.phase, desired.message or "")
    if written is not None and wire.get("phase") != current.get("phase") and desired.phase is not None:
        failed = desired.phase in (SweepPhase.FAILED, SweepPhase.INVALID)
        event(sweep, f"Sweep{desired.phase.value}", desired.message or desired.phase.value, warning=failed)
