# mypy: disable-error-code="arg-type"
# kopf types each handler as a Protocol naming every keyword with its widest type; these handlers
# take the few they use (and **_), which mypy cannot match against those Protocols.
"""Every event the operator reacts to, in one place; the bodies live in `handlers/`.

Run: `kopf run --standalone -A -m ftbench_operator.app` (cluster-wide) or with
`--namespace NS` (namespaced), or `python -m ftbench_operator`, which adds the liveness
endpoint. It reacts to FineTuneExperiments, their pods and workloads, profile ConfigMaps and
FineTuneSweeps; the design notes list each reaction and its handler. No timers or daemons (they
would add finalizers), no on.delete handlers: deletion is left to owner references and the garbage
collector, so a delete never hangs when the operator is gone.

Design notes: docs/design-notes.md, "operator/ftbench_operator/app.py".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import kopf

from ftbench.api.resource import GROUP, PLURAL, SWEEP_PLURAL, VERSION
from ftbench.contracts.labels import (
    ATTEMPT_LABEL,
    EXPERIMENT_LABEL,
    MANAGED_BY,
    PROFILE_LABEL,
    RETRY_ANNOTATION,
    label_value,
)
from ftbench.render.registry import PYTORCH_JOB, TRAIN_JOB, WORKLOAD_KINDS
from ftbench.render.trainjob import TRAINER_API_VERSION
from ftbench_operator.context import OperatorContext, api_errors
from ftbench_operator.diffbase import BoundedDiffBaseStorage
from ftbench_operator.handlers.handle_follow import pod_index_key, sync_locked
from ftbench_operator.handlers.handle_retry import retry
from ftbench_operator.handlers.handle_spec_change import spec_changed
from ftbench_operator.handlers.handle_start import start_by_name, start_or_resume
from ftbench_operator.handlers.handle_sweep import reconcile_sweep, sweep_owner
from ftbench_operator.kube import Kube, connect
from ftbench_operator.metrics import OperatorMetrics
from ftbench_operator.profile_source import ProfileSource
from ftbench_operator.settings import OperatorSettings
from ftbench_operator.summaries import summarize_pod
from ftbench_operator.syncer import Syncer

FTE = (GROUP, VERSION, PLURAL)
SWEEP = (GROUP, VERSION, SWEEP_PLURAL)
KOPF_PREFIX = f"kopf.{GROUP}"  # kopf's own bookkeeping annotations, apart from user-facing ones
LAST_HANDLED = "last-handled-configuration"
FINALIZER = f"{GROUP}/finalizer"  # declared for kopf; nothing here requires one, so none is added
HANDLER_BACKOFF = 5.0


def _ctx(memo: kopf.Memo) -> OperatorContext:
    return memo["ctx"]


@contextmanager
def _handling(memo: kopf.Memo, handler: str, pods: kopf.Index[Any, Any] | None = None) -> Iterator[OperatorContext]:
    """What every change handler of an experiment runs inside, written once: the pod index it was
    given (kopf passes indices to handlers only), its time in the operator's metrics, and an API error
    turned into kopf's temporary error, so the handler is retried."""
    ctx = _ctx(memo)
    if pods is not None:
        ctx.pods = pods
    with ctx.metrics.timed(handler), api_errors(ctx.settings.api_retry_delay_seconds):
        yield ctx


def _syncer(memo: kopf.Memo) -> Syncer:
    return memo["syncer"]


def _sweeps(memo: kopf.Memo) -> Syncer:
    return memo["sweeps"]


def _starts(memo: kopf.Memo) -> Syncer:
    return memo["starts"]


def never_started(body: Mapping[str, Any]) -> bool:
    """kopf's record says the create handler succeeded, yet the experiment has no status at all.

    kopf writes its record (an annotation) by name after a handler returns. When an experiment is
    deleted and re-created at once (`kubectl replace --force`, a sweep deleted and re-applied), the
    handler of the deleted one may finish after the new one exists, and the record lands on the
    new object: kopf then never runs `create` for it. Every path of `start_or_resume` writes a
    status phase before it returns, so a record without a phase can only be such a misdirected one."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp") or f"{KOPF_PREFIX}/{LAST_HANDLED}" not in (meta.get("annotations") or {}):
        return False
    return not (body.get("status") or {}).get("phase")


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    opts = OperatorSettings.from_env()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = BoundedDiffBaseStorage(
        prefix=KOPF_PREFIX, key=LAST_HANDLED, tracked=(RETRY_ANNOTATION,)
    )
    settings.watching.server_timeout = opts.watch_server_timeout_seconds
    settings.watching.client_timeout = opts.watch_client_timeout_seconds
    settings.posting.level = logging.WARNING  # Events come from explicit kopf.event calls, not logs
    kube = Kube(connect(opts.api_threads), threads=opts.api_threads)
    profiles = ProfileSource(opts.profile_file, opts.profile_key)
    minor = await kube.server_minor()
    profiles.set_server_features(
        minor,
        training_operator=await kube.has_crd(PYTORCH_JOB.crd),
        training_runtimes=await trainer_v2_runtimes(kube),
    )
    if opts.profile_file is None:
        found = await kube.get_config_map(opts.profile_namespace, opts.profile_config_map)
        if found is not None:
            profiles.update_from_config_map(found)
    profiles.current()  # load the profile now: a broken one stops the start, with every bad field named
    if profiles.error is not None:  # later edits that break it are logged and the last good one stays
        logger.error("the cluster profile is invalid, so the operator does not start: %s", profiles.error)
        raise kopf.PermanentError(f"invalid cluster profile: {profiles.error}")
    metrics = OperatorMetrics()
    metrics.start(opts.metrics_port)
    ctx = OperatorContext(settings=opts, kube=kube, profiles=profiles, metrics=metrics)
    memo["ctx"] = ctx
    memo["syncer"] = syncer = Syncer(ctx, sync_locked, "follow")
    ctx.request_sync_later = syncer.request_later
    memo["sweeps"] = Syncer(ctx, reconcile_sweep, "sweep")
    memo["starts"] = Syncer(ctx, start_by_name, "create")
    logger.info("ftbench operator ready: Kubernetes 1.%s, profile from %s", minor, profiles.origin)


async def trainer_v2_runtimes(kube: Kube) -> frozenset[str] | None:
    """ClusterTrainingRuntime names when Kubeflow Trainer v2 (the TrainJob CRD) is installed."""
    if not await kube.has_crd(TRAIN_JOB.crd):
        return None
    return await kube.cluster_object_names(TRAINER_API_VERSION, "clustertrainingruntimes")


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "syncer" in memo:
        await _syncer(memo).stop()
    if "sweeps" in memo:
        await _sweeps(memo).stop()
    if "starts" in memo:
        await _starts(memo).stop()
    if "ctx" in memo:
        _ctx(memo).kube.close()


@kopf.on.probe(id="profile")
def profile_probe(memo: kopf.Memo, **_: Any) -> str:
    """Part of the liveness/readiness answer: where the profile came from, and its last error."""
    profiles = _ctx(memo).profiles
    return profiles.origin if profiles.error is None else f"{profiles.origin} (error: {profiles.error})"


# Indexes: small tuples, so a sync reads children from memory instead of listing them.


@kopf.index(*FTE)
def experiments(namespace: str, name: str, **_: Any) -> dict[tuple[str, str], str]:
    """(namespace, experiment label value) -> experiment name: labels hash names over 63 chars."""
    return {(namespace, label_value(name)): name}


@kopf.index("pods", labels=MANAGED_BY)
def ftbench_pods(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    if EXPERIMENT_LABEL not in labels:
        return {}
    return {pod_index_key(namespace, labels[EXPERIMENT_LABEL], labels.get(ATTEMPT_LABEL, "0")): summarize_pod(body)}


# The experiment itself.


@kopf.on.create(*FTE, backoff=HANDLER_BACKOFF)
async def create(body: kopf.Body, memo: kopf.Memo, ftbench_pods: kopf.Index[Any, Any], **_: Any) -> None:
    with _handling(memo, "create", ftbench_pods) as ctx:
        await start_or_resume(ctx, body)


@kopf.on.resume(*FTE, backoff=HANDLER_BACKOFF)
async def resume(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, ftbench_pods: kopf.Index[Any, Any], **_: Any
) -> None:
    with _handling(memo, "resume", ftbench_pods) as ctx:
        if RETRY_ANNOTATION in body.metadata.annotations:
            await retry(ctx, body, patch)
        await start_or_resume(ctx, body)


@kopf.on.update(*FTE, field="spec", backoff=HANDLER_BACKOFF)
async def update_spec(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    with _handling(memo, "spec_change") as ctx:
        await spec_changed(ctx, body)


@kopf.on.update(*FTE, annotations={RETRY_ANNOTATION: kopf.PRESENT}, backoff=HANDLER_BACKOFF)
async def retry_requested(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    with _handling(memo, "retry") as ctx:
        await retry(ctx, body, patch)


@kopf.on.event(*FTE)
async def experiment_event(type: str, body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    if "ctx" not in memo:
        return
    if type == "DELETED":
        _ctx(memo).forget(namespace, name)
    else:
        _ctx(memo).metrics.observe(body)
        if never_started(body):
            logging.getLogger(__name__).info(
                "%s/%s: recorded as handled but never started; starting it", namespace, name
            )
            _starts(memo).request(namespace, name)
    sweep = sweep_owner(body)
    if sweep is not None:  # a sweep's child moved on (or is gone): the sweep may start the next run
        _sweeps(memo).request(namespace, sweep)


# Sweeps: every change (and each one found at start) requests a reconcile pass.


@kopf.on.event(*SWEEP)
async def sweep_event(type: str, body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    if "ctx" not in memo:
        return
    ctx = _ctx(memo)
    if type == "DELETED":
        ctx.forget_sweep(namespace, name)
        return
    ctx.metrics.observe_sweep(body)
    if ctx.own_writes.get((namespace, name)) == body.metadata.get("resourceVersion"):
        return  # the status this operator just wrote: nothing new to act on
    _sweeps(memo).request(namespace, name)


# Children: every change requests a sync of the experiment they belong to.


def _request_sync(memo: kopf.Memo, experiments: kopf.Index[Any, Any], namespace: str, labels: kopf.Labels) -> None:
    value = labels.get(EXPERIMENT_LABEL)
    if value is None or "syncer" not in memo:
        return
    for name in experiments.get((namespace, value), ()):
        _syncer(memo).request(namespace, name)


@kopf.on.event("pods", labels=MANAGED_BY)
async def child_event(
    namespace: str,
    labels: kopf.Labels,
    memo: kopf.Memo,
    experiments: kopf.Index[Any, Any],
    ftbench_pods: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    if "ctx" in memo:
        _ctx(memo).pods = ftbench_pods
    _request_sync(memo, experiments, namespace, labels)


for _workload in WORKLOAD_KINDS:  # every runtime's workload kind (render.registry), watched the same way
    kopf.on.event(_workload.group, _workload.version, _workload.plural, labels=MANAGED_BY)(child_event)


@kopf.on.event("", "v1", "configmaps", labels={PROFILE_LABEL: "true"})
async def profile_config_map(type: str, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    ctx = _ctx(memo)
    opts = ctx.settings
    if ctx.settings.profile_file is not None or name != opts.profile_config_map:
        return
    if namespace != opts.profile_namespace:  # one namespace only, always (tenants own the others)
        return
    if type == "DELETED":
        ctx.profiles.reset()
    else:
        ctx.profiles.update_from_config_map(body)
