"""Render an attempt and create or delete its children: the only code that writes them.

Names are deterministic (`ftbench.render.names`), so creating is idempotent: an HTTP 409 means
an earlier reconcile (maybe by an operator that was killed) already created the object, and a
restarted operator never duplicates children. Owner references come from `kopf.adopt`; the
garbage collector removes the children when the experiment is deleted, so no finalizer is needed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.profile import ClusterProfile, catalog_for
from ftbench.render.manifests import ATTEMPT_LABEL, EXPERIMENT_LABEL, Rendered, render_experiment
from ftbench.render.names import label_value
from ftbench.render.runtimes import TRIAL_LABEL
from ftbench_operator.kube import Kube

Obj = dict[str, Any]
ACCEPTED_SPEC_ANNOTATION = "ftbench.io/accepted-spec"
# Kinds an attempt may own, deleted on retry (pods go with their workload).
CHILD_KINDS = (
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
)


def accepted_spec(body: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The spec (and generation) the operator accepted at creation; later edits are ignored.

    Falls back to the current spec for objects that have no record yet (first reconcile).
    """
    meta = body.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(ACCEPTED_SPEC_ANNOTATION)
    if raw:
        try:
            record = json.loads(raw)
            return dict(record["spec"]), record.get("generation")
        except (ValueError, KeyError, TypeError):
            pass
    return dict(body.get("spec") or {}), meta.get("generation")


def accepted_spec_annotation(spec: Mapping[str, Any], generation: int | None) -> str:
    return json.dumps({"generation": generation, "spec": spec}, separators=(",", ":"), sort_keys=True)


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
    return int(value) if value is not None and obj.get("kind") in ("Job", "TrainJob") else None


def runtime_ref(rendered: Rendered) -> dict[str, str]:
    """status.runtime: which runtime runs the attempt and why."""
    return {"name": rendered.runtime.value, "reason": rendered.reason}


def workload_ref(rendered: Rendered) -> dict[str, str]:
    """status.job: the first workload (for one Job per trial, trial 0's Job)."""
    first = next(o for o in rendered.objects if o["metadata"]["name"] == rendered.names.workloads[0])
    return {"apiVersion": first["apiVersion"], "kind": first["kind"], "name": first["metadata"]["name"]}


async def create_all(kube: Kube, objects: Iterable[Obj], owner: Mapping[str, Any]) -> int:
    """Create in order (ConfigMap before the pods that mount it); returns how many were new."""
    created = 0
    for obj in objects:
        child = copy.deepcopy(obj)
        kopf.adopt(child, owner=dict(owner))
        created += await kube.create(child)
    return created


def attempt_selector(name: str, attempt: int | None = None, *, other_than: int | None = None) -> str:
    selector = f"{EXPERIMENT_LABEL}={label_value(name)}"
    if attempt is not None:
        selector += f",{ATTEMPT_LABEL}={attempt}"
    if other_than is not None:
        selector += f",{ATTEMPT_LABEL}!={other_than}"
    return selector


async def delete_owned(kube: Kube, owner: Mapping[str, Any], selector: str) -> int:
    """Delete this experiment's children matching `selector` (checked by owner uid, not by label alone)."""
    meta = owner["metadata"]
    deleted = 0
    for api_version, kind in CHILD_KINDS:
        for child in await kube.list(api_version, kind, meta["namespace"], selector):
            owners = (child.get("metadata") or {}).get("ownerReferences") or []
            if any(ref.get("uid") == meta["uid"] for ref in owners):
                await kube.delete(api_version, kind, meta["namespace"], child["metadata"]["name"])
                deleted += 1
    return deleted
