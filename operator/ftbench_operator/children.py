"""Render an attempt and create or delete its children: the only code that writes them.

Names are deterministic (`ftbench.render.names`), so creating is idempotent: an HTTP 409 on an
object whose owner reference names this experiment's uid means an earlier reconcile (maybe by an
operator that was killed) already created it, and a restarted operator never duplicates
children. A 409 on an object owned by anything else is `ChildConflict`: it is never adopted, and
its output is never read as this experiment's. Owner references come from `kopf.adopt`; the
garbage collector removes the children when the experiment is deleted, so no finalizer is needed.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import TRIAL_LABEL
from ftbench.contracts.labels import attempt_selector as attempt_selector  # the handlers' `children.attempt_selector`
from ftbench.kubeapi import KubeError
from ftbench.render.manifests import Rendered, render_experiment
from ftbench.render.registry import WORKLOAD_KINDS, workload_kind
from ftbench_operator.kube import Kube, collection_path

# Kinds an attempt may own, deleted on retry (pods go with their workload).
CHILD_KINDS = (*((w.api_version, w.kind) for w in WORKLOAD_KINDS), ("v1", "Service"), ("v1", "ConfigMap"))
# Before 1.24 the token controller adds a token Secret to a new ServiceAccount, and until it has,
# the ServiceAccount admission plugin refuses the pods (the Job controller then backs off >= 10 s).
LEGACY_TOKEN_MINOR = 24
TOKEN_WAIT_SECONDS = 10.0


def render(body: Mapping[str, Any], spec: FineTuneExperimentSpec, profile: ClusterProfile, attempt: int) -> Rendered:
    meta = body["metadata"]
    return render_experiment(
        spec,
        catalog_for(profile),
        profile,
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
        attempt=attempt,
    )


def initial_objects(rendered: Rendered) -> list[Obj]:
    """What to create now. One Job or TrainJob per trial starts with trial 0 only: the trials
    must run one after another, and `trial_object` supplies the next one when due."""
    return [o for o in rendered.objects if _trial(o) in (None, 0)]


def trial_object(rendered: Rendered, trial: int) -> Obj | None:
    return next((o for o in rendered.objects if _trial(o) == trial), None)


def _trial(obj: Mapping[str, Any]) -> int | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(TRIAL_LABEL)
    kind = workload_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    return int(value) if value is not None and kind is not None and kind.one_per_trial else None


def runtime_ref(rendered: Rendered) -> dict[str, str]:
    """status.runtime: which runtime runs the attempt and why."""
    return {"name": rendered.runtime.value, "reason": rendered.reason}


def workload_ref(rendered: Rendered) -> dict[str, str]:
    """status.job: the first workload (for one Job per trial, trial 0's Job), not the headless Service of the
    same name that an Indexed Job renders before it."""
    first = next(
        o
        for o in rendered.objects
        if o["metadata"]["name"] == rendered.names.workloads[0] and workload_kind(o["apiVersion"], o["kind"])
    )
    return {"apiVersion": first["apiVersion"], "kind": first["kind"], "name": first["metadata"]["name"]}


class ChildConflict(Exception):
    """An object with a child's name exists and does not belong to this experiment."""

    def __init__(self, obj: Mapping[str, Any], existing: Mapping[str, Any]) -> None:
        meta = existing.get("metadata") or {}
        owners = ", ".join(f"{r.get('kind')} {r.get('name')}" for r in meta.get("ownerReferences") or []) or "nobody"
        super().__init__(
            f"a {obj['kind']} named {meta.get('name')} already exists in namespace {meta.get('namespace')} and "
            f"belongs to {owners}, not to this experiment; delete it (or rename this experiment) and retry"
        )


class OwnerGone(Exception):
    """The object a handler is creating children for was deleted (or replaced by a namesake) meanwhile.

    Checked just before a workload is created: a workload created for a deleted experiment is
    garbage-collected at once, and on Kubernetes 1.20 its Job controller then keeps expecting the
    pod it was creating under that Job's name for up to 5 minutes, so the re-created experiment's
    Job of the same name got no pod (a sweep deleted and re-applied at once stalled that way)."""


class PredecessorChild(Exception):
    """An object with a child's name belongs to an earlier object of the same kind and name: that
    one was deleted (names are unique), and the garbage collector has not removed its children yet.
    Never adopted (its output is not ours); the new owner waits until it is gone."""

    def __init__(self, obj: Mapping[str, Any], owner: Mapping[str, Any], old_uid: str) -> None:
        self.kind, self.name = obj["kind"], obj["metadata"]["name"]
        super().__init__(
            f"{self.kind} {self.name} still belongs to the deleted {owner['kind']} {owner['metadata']['name']} "
            f"(uid {old_uid}) that had this name, and is being garbage-collected; this run starts when it is gone"
        )


def predecessor_uid(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> str | None:
    """The uid of an earlier incarnation of `owner` (same apiVersion, kind and name) that owns `obj`."""
    meta = owner["metadata"]
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        same = (ref.get("apiVersion"), ref.get("kind"), ref.get("name")) == (
            owner.get("apiVersion"), owner.get("kind"), meta.get("name"))  # fmt: skip
        if same and ref.get("uid") != meta.get("uid"):
            return str(ref.get("uid"))
    return None


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Ours only if an owner reference says so: labels and names can be written by anyone."""
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _pod_specs(node: Any) -> Iterable[Mapping[str, Any]]:
    """Every pod spec in a rendered object (Job template, PyTorchJob replica templates)."""
    if isinstance(node, Mapping):
        if "containers" in node:
            yield node
        for value in node.values():
            yield from _pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pod_specs(value)


async def missing_dependencies(kube: Kube, objects: Iterable[Obj], namespace: str) -> list[str]:
    """What the pods reference but the cluster lacks (their ServiceAccount, PriorityClass).

    Without them the workload's controller cannot create a pod and the run would wait forever,
    with FailedCreate events on the Job as the only sign; checked before anything is created."""
    accounts, classes = set(), set()
    objects = list(objects)
    created = {o["metadata"]["name"] for o in objects if o.get("kind") == "ServiceAccount"}
    for obj in objects:
        for pod in _pod_specs(obj.get("spec") or {}):
            accounts.add(pod.get("serviceAccountName"))
            classes.add(pod.get("priorityClassName"))
    accounts -= created  # the experiment's own account: created first, with the run
    missing = []
    for account in sorted(a for a in accounts if a):
        path = f"{collection_path('v1', 'ServiceAccount', namespace)}/{account}"
        if await kube.exists(path) is False:
            missing.append(
                f"ServiceAccount {account} does not exist in namespace {namespace} (the cluster profile's "
                "serviceAccount: create it there, e.g. with the chart's trainer.namespaces)"
            )
    for name in sorted(c for c in classes if c):
        if await kube.exists(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}") is False:
            missing.append(f"PriorityClass {name} does not exist (spec.run.priorityClassName)")
    return missing


async def create_all(kube: Kube, objects: Iterable[Obj], owner: Mapping[str, Any]) -> int:
    """Create in order (ConfigMap before the pods that mount it); returns how many were new.

    Raises `PredecessorChild` when a name is still held by a child of a deleted owner of the same
    name (wait), `ChildConflict` when anything else holds it (never adopted), and `OwnerGone` when
    the owner was deleted before its workload was created (nothing more is created)."""
    created = 0
    uid = owner["metadata"]["uid"]
    for obj in objects:
        if workload_kind(str(obj.get("apiVersion")), str(obj.get("kind"))) is not None:
            await _check_owner(kube, owner)
        child = copy.deepcopy(obj)
        kopf.adopt(child, owner=dict(owner))  # type: ignore[arg-type]  # kopf takes any mapping
        if await kube.create(child):
            created += 1
            if child["kind"] == "ServiceAccount":
                await _await_token(kube, child)
            continue
        meta = child["metadata"]
        existing = await kube.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
        if existing is None:  # deleted in between (a predecessor being collected): try again later
            raise KubeError(409, "Conflict", f"{child['kind']} {meta['name']} is being deleted; retrying")
        if not owned_by(existing, uid):
            old = predecessor_uid(existing, owner)
            if old is not None:
                raise PredecessorChild(child, owner, old)
            raise ChildConflict(child, existing)
    return created


async def _check_owner(kube: Kube, owner: Mapping[str, Any]) -> None:
    """Raise OwnerGone unless `owner` (that very object, by uid) still exists and is not being deleted."""
    meta = owner["metadata"]
    current = await kube.get(str(owner.get("apiVersion")), str(owner.get("kind")), meta["namespace"], meta["name"])
    now = (current or {}).get("metadata") or {}
    if current is None or now.get("uid") != meta["uid"] or now.get("deletionTimestamp"):
        raise OwnerGone(f"{owner.get('kind')} {meta['namespace']}/{meta['name']} (uid {meta['uid']}) is gone")


async def _await_token(kube: Kube, account: Mapping[str, Any]) -> None:
    """On servers with legacy token Secrets, give the token controller a moment before the pods."""
    if kube.minor is None or kube.minor >= LEGACY_TOKEN_MINOR:
        return
    meta = account["metadata"]
    deadline = time.monotonic() + TOKEN_WAIT_SECONDS
    while time.monotonic() < deadline:
        stored = await kube.get("v1", "ServiceAccount", meta["namespace"], meta["name"])
        if stored is None or stored.get("secrets"):
            return
        await asyncio.sleep(0.2)


async def delete_owned(kube: Kube, owner: Mapping[str, Any], selector: str) -> int:
    """Delete this experiment's children matching `selector` (checked by owner uid, not by label alone)."""
    meta = owner["metadata"]
    deleted = 0
    for api_version, kind in CHILD_KINDS:
        for child in await kube.list(api_version, kind, meta["namespace"], selector):
            if owned_by(child, meta["uid"]):
                await kube.delete(api_version, kind, meta["namespace"], child["metadata"]["name"])
                deleted += 1
    return deleted
