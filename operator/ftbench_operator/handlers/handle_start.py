"""Create and resume: validate the accepted spec, render, create the children, record it.

One idempotent path for a new experiment and for one found at operator start. Order matters
for restart safety: children are created *before* `status.job` is written, so an operator
killed in between finds no `status.job`, creates again (409: exists) and records it; one killed
after finds `status.job` and only follows the run (a workload missing then was deleted by hand).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ftbench.api.prediction_report import MemoryFit
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.rules.data import too_few_rows
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import Phase
from ftbench.api.validation import validate_spec_dict
from ftbench.contracts.enums import OomPrecheck
from ftbench.kubeapi import KubeError
from ftbench.predict.prediction import prediction_report, rows_of
from ftbench.render.manifests import Rendered
from ftbench.render.plan import PlanError
from ftbench.render.registry import RUNTIMES
from ftbench_operator import children, predictor, status
from ftbench_operator.body import ExperimentView
from ftbench_operator.classify import Observation
from ftbench_operator.context import OperatorContext, event
from ftbench_operator.handlers.handle_follow import sync_once
from ftbench_operator.reasons import (
    CHILD_CONFLICT,
    CHILD_REJECTED,
    INVALID_SPEC,
    MISSING_DEPENDENCY,
    NOT_RUNNABLE,
    PREDICTED_OOM,
    TOO_FEW_TRAINED_ROWS,
    WAITING_FOR_PREDECESSOR,
)
from ftbench_operator.writer import Announce, write_status

log = logging.getLogger(__name__)


async def start_or_resume(ctx: OperatorContext, body: Mapping[str, Any]) -> None:
    async with ctx.fresh(body) as fresh:
        if fresh is None or fresh.deleting or fresh.finished:
            return
        if fresh.job is not None:
            await sync_once(ctx, fresh.namespace, fresh.name, fresh)
            return
        await start_attempt(ctx, fresh, fresh.attempt)


async def start_by_name(ctx: OperatorContext, namespace: str, name: str) -> None:
    """`start_or_resume` for an experiment kopf will not start by itself (see `app.never_started`);
    run from a Syncer, so a temporary failure (a predecessor's children) is retried."""
    found = await ctx.kube.get_experiment(namespace, name)
    if found is not None:
        await start_or_resume(ctx, found)


async def start_attempt(ctx: OperatorContext, experiment: ExperimentView, attempt: int) -> None:
    """Validate, render and create attempt `attempt`; record the accepted spec in status on start."""
    spec_dict, accepted_generation = experiment.accepted_spec()
    builder = status.StatusBuilder(experiment.status, experiment.generation, status.utcnow())
    profile = ctx.profiles.current()
    report = validate_spec_dict(spec_dict, catalog_for(profile), profile=profile)
    if not report.ok or report.spec is None:
        await _invalid(ctx, experiment, builder, INVALID_SPEC, report.summary())
        return
    try:
        rendered = children.render(experiment.body, report.spec, profile, attempt)
    except PlanError as err:
        await _invalid(ctx, experiment, builder, NOT_RUNNABLE, str(err))
        return
    # From here on the spec is accepted: a run that fails before it starts records it too, so a
    # retry (which runs status.acceptedSpec) runs this spec, never an edit made after it.
    builder.accept(report.spec, accepted_generation)
    predicted, fit, too_few = await _predict(ctx, builder, report.spec, rendered, profile)
    if too_few is not None:  # the trainer would stop before its first step: nothing is created
        await _invalid(ctx, experiment, builder, TOO_FEW_TRAINED_ROWS, f"spec.modelMaxLength: {too_few}", predicted)
        return
    if fit is not None and not fit.fits and report.spec.run.oom_precheck == OomPrecheck.REFUSE:
        refused = f"{fit.sentence()}; spec.run.oomPrecheck is refuse, so nothing was created (warn runs it anyway)"
        await _invalid(ctx, experiment, builder, PREDICTED_OOM, refused, predicted)
        return
    owner, name = experiment.body, experiment.name
    if attempt > 0:  # an earlier attempt's children may survive an operator killed mid-retry
        await children.delete_owned(ctx.kube, owner, children.attempt_selector(name, other_than=attempt))
    missing = await children.missing_dependencies(ctx.kube, children.initial_objects(rendered), experiment.namespace)
    if missing:  # Failed, not Invalid: once the object exists, ftbench.io/retry runs the same spec
        await _failed(ctx, experiment, builder, MISSING_DEPENDENCY, "; ".join(missing))
        return
    try:
        created = await children.create_all(ctx.kube, children.initial_objects(rendered), owner)
    except children.OwnerGone as err:  # what it did create is the garbage collector's
        log.info("%s: not started: %s", name, err)
        return
    except children.PredecessorChild as err:
        await _wait_for_predecessor(ctx, experiment, builder, str(err))
        raise KubeError(409, "Conflict", str(err)) from err  # temporary: the handler runs again later
    except (KubeError, children.ChildConflict) as err:
        if isinstance(err, KubeError) and err.temporary:
            raise
        # Retrying cannot help; remove what this attempt did create, so nothing is left behind.
        await children.delete_owned(ctx.kube, owner, children.attempt_selector(name, attempt))
        await _not_created(ctx, experiment, builder, rendered, err)
        return
    roce_problem = builder.roce(report.spec, profile)
    desired = builder.started(
        attempt,
        children.workload_ref(rendered),
        report.spec,
        accepted_generation,
        runtime=children.runtime_ref(rendered),
    )
    started = f"attempt {attempt}: created {rendered.runtime.value} {rendered.names.workloads[0]}"
    await write_status(
        ctx, experiment, {**desired, **predicted}, Announce("Started", started, when="always" if created else "never")
    )
    if roce_problem and created:
        event(experiment, "NoRoceNetwork", roce_problem, warning=True)
    if fit is not None and not fit.fits and created:
        event(experiment, PREDICTED_OOM, f"{fit.sentence()}; running anyway (spec.run.oomPrecheck warn)", warning=True)


async def _predict(
    ctx: OperatorContext,
    builder: status.StatusBuilder,
    spec: FineTuneExperimentSpec,
    rendered: Rendered,
    profile: ClusterProfile,
) -> tuple[status.Status, MemoryFit | None, str | None]:
    """status.prediction and condition MemoryFits before anything is created; the verdict, if there is one; and
    why the rows that train cannot fill one optimizer step, where the predictor counted them."""
    if spec.run.oom_precheck == OomPrecheck.OFF:
        return {}, None, None
    url = ctx.settings.predictor_url
    if not url:
        return builder.predicted(None, "no predictor is configured (the chart's predictor.enabled)"), None, None
    try:
        prediction = await predictor.predict(url, rendered.plan, ctx.settings.predictor_timeout_seconds)
    except predictor.PredictorUnavailable as err:
        log.warning("%s: no memory prediction: %s", rendered.plan.experiment_ref.name, err)
        return builder.predicted(None, str(err)), None, None
    catalog = catalog_for(profile)
    report = prediction_report(prediction, spec, catalog, profile)
    rows = rows_of(prediction, spec, catalog)
    return builder.predicted(report), report.fit, too_few_rows(spec, rows) if rows is not None else None


async def _not_created(
    ctx: OperatorContext,
    experiment: ExperimentView,
    builder: status.StatusBuilder,
    rendered: Rendered,
    err: KubeError | children.ChildConflict,
) -> None:
    """A refused child, said in words: a kind the cluster does not serve or an object the server
    rejects (422) make the spec not runnable here (Invalid); a name taken by someone else's object,
    admission or quota refusals are a Failed run with the server's reason."""
    if isinstance(err, children.ChildConflict):
        await _failed(ctx, experiment, builder, CHILD_CONFLICT, str(err))
    elif err.status == 404 and (missing := RUNTIMES[rendered.runtime].workload.missing):
        await _invalid(ctx, experiment, builder, NOT_RUNNABLE, missing)
    elif err.status in (404, 422):
        await _invalid(
            ctx, experiment, builder, NOT_RUNNABLE, f"the API server refused the run's objects: {err.server_message}"
        )
    else:
        await _failed(
            ctx, experiment, builder, CHILD_REJECTED, f"creating the run's objects failed: {err.server_message}"
        )


async def _wait_for_predecessor(
    ctx: OperatorContext, experiment: ExperimentView, builder: status.StatusBuilder, message: str
) -> None:
    """Pending with the reason while an earlier experiment of this name is garbage-collected
    (deleted and re-created at once); written and announced once, not on every retry."""
    observed = builder.observed(Observation(Phase.PENDING, WAITING_FOR_PREDECESSOR, message), trials=1)
    await write_status(ctx, experiment, {**observed, **builder.accepted}, Announce(WAITING_FOR_PREDECESSOR, message))


async def _failed(
    ctx: OperatorContext, experiment: ExperimentView, builder: status.StatusBuilder, reason: str, message: str
) -> None:
    desired = {**builder.observed(Observation(Phase.FAILED, reason, message), trials=1), **builder.accepted}
    await _write(ctx, experiment, builder, desired, reason, message)


async def _invalid(
    ctx: OperatorContext,
    experiment: ExperimentView,
    builder: status.StatusBuilder,
    reason: str,
    message: str,
    extra: status.Status | None = None,
) -> None:
    desired = {**builder.invalid_spec(reason, message), **(extra or {})}
    await _write(ctx, experiment, builder, desired, reason, message)


async def _write(
    ctx: OperatorContext,
    experiment: ExperimentView,
    builder: status.StatusBuilder,
    desired: status.Status,
    reason: str,
    message: str,
) -> None:
    """A run that ends before it starts: its status, and a Warning Event saying why."""
    await write_status(ctx, experiment, desired, Announce(reason, message, warning=True))
