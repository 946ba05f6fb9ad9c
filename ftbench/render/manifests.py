"""spec + catalog + cluster profile + experiment identity -> the Kubernetes objects that run it.

Pure: the same inputs give the same objects (names included), so the operator can re-render on
every reconcile and `ftbench render` prints exactly what the operator would create. Owner
references are not set here; the operator adopts the objects (`kopf.adopt`).

Objects, in the order to create them: the trainer's ServiceAccount, Role and RoleBinding
(`ftbench.render.access`: the pods reference the account), the plan ConfigMap (the pods mount
it), then the headless Service (Indexed Job, multi-node), then the workload(s): Job(s),
PyTorchJob or TrainJob(s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ftbench.api import effective
from ftbench.api.fabric import uses_roce
from ftbench.api.profile import ClusterProfile
from ftbench.api.runtime_choice import Carry, RuntimeChoice, preferred_runtime
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import (
    APP_NAME,
    ATTEMPT_LABEL,
    EXPERIMENT_LABEL,
    EXPERIMENT_NAME_ANNOTATION,
    MANAGED_BY_LABEL,
    RUNTIME_ANNOTATION,
    label_value,
)
from ftbench.contracts.live_metrics import TRAINER_METRICS_PORT
from ftbench.contracts.plan import PLAN_FILENAME, ExperimentRef, LaunchPlan
from ftbench.render.access import pod_account, trainer_access
from ftbench.render.names import ChildNames, child_names
from ftbench.render.plan import PlanError, build_plan
from ftbench.render.pods import PodInputs
from ftbench.render.registry import RUNTIMES
from ftbench.render.runtimes import (
    WorkloadMeta,
)


class RenderError(PlanError):
    """The spec is valid but cannot run on the chosen runtime or cluster profile."""


@dataclass(frozen=True)
class Rendered:
    """One attempt, rendered: the objects in creation order, their names, and the plan they carry."""

    runtime: Runtime
    names: ChildNames
    plan: LaunchPlan
    objects: tuple[Obj, ...]
    reason: str = ""  # why this runtime (spec, profile pin, or what auto-detection found)
    warnings: tuple[str, ...] = ()  # what may not work as expected on this runtime (registry)


def labels(experiment: str, attempt: int) -> dict[str, str]:
    """Labels on every object and pod: how the operator (and users) select one attempt's pods."""
    value = label_value(experiment)
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/component": "trainer",
        "app.kubernetes.io/instance": value,
        "app.kubernetes.io/part-of": APP_NAME,
        MANAGED_BY_LABEL: APP_NAME,
        EXPERIMENT_LABEL: value,
        ATTEMPT_LABEL: str(attempt),
    }


def choose_runtime(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> RuntimeChoice:
    """`preferred_runtime`, refused where that runtime cannot carry the spec (validation asks the
    same refusal first, so this is the backstop of a caller that skipped it)."""
    choice = preferred_runtime(spec, catalog, profile)
    refusal = RUNTIMES[choice.runtime].refusal(Carry.of(spec, catalog, profile))
    if refusal is not None:
        raise RenderError(refusal)
    return choice


def _names(
    spec: FineTuneExperimentSpec, profile: ClusterProfile, name: str, attempt: int, runtime: Runtime, trials: int
) -> ChildNames:
    return child_names(
        name,
        attempt,
        runtime,
        number_nodes=spec.number_nodes,
        trials=trials,
        replicated_job=profile.train_job.replicated_job,
    )


def experiment_names(
    spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile, *, name: str, attempt: int
) -> ChildNames:
    """The names `render_experiment` gives this attempt's objects (for the operator's lookups)."""
    runtime = choose_runtime(spec, catalog, profile).runtime
    return _names(spec, profile, name, attempt, runtime, effective.trials(spec, catalog))


def plan_config_map(plan: LaunchPlan, name: str, meta: WorkloadMeta) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta.metadata(name, queued=False),
        "data": {PLAN_FILENAME: plan.to_json()},
    }


def render_experiment(
    spec: FineTuneExperimentSpec,
    catalog: Catalog,
    profile: ClusterProfile,
    *,
    name: str,
    namespace: str = "",
    uid: str = "",
    attempt: int = 0,
    dataset_entries: int | None = None,
) -> Rendered:
    """Render one attempt of experiment `name`. Raises PlanError/RenderError for impossible runs."""
    choice = choose_runtime(spec, catalog, profile)
    runtime = choice.runtime
    carry = Carry.of(spec, catalog, profile)
    names = _names(spec, profile, name, attempt, runtime, carry.trials)
    plan = build_plan(
        spec,
        catalog,
        profile,
        ref=ExperimentRef(name=name, namespace=namespace, uid=uid, attempt=attempt),
        runtime=runtime,
        master_host=names.master_host,
        dataset_entries=dataset_entries,
        report_progress_to_kubernetes=profile.report_progress,
        metrics_port=TRAINER_METRICS_PORT,  # on a cluster every rank serves its live metrics
    )
    common = labels(name, attempt)
    meta = WorkloadMeta(
        namespace=namespace,
        labels=common,
        annotations={EXPERIMENT_NAME_ANNOTATION: name, RUNTIME_ANNOTATION: runtime.value},
        queue_name=spec.run.queue_name,
        active_deadline_seconds=spec.run.active_deadline_seconds,
    )
    roce = uses_roce(spec, profile)
    inputs = PodInputs(
        spec=spec,
        plan=plan,
        profile=profile,
        image=profile.images.image_for(spec.engine, spec.fms_hf_tuning_version),
        plan_config_map=names.plan_config_map,
        labels=common,
        service_account=pod_account(profile, name, roce=roce),
    )
    workloads = RUNTIMES[runtime].build(carry)(inputs, meta, names)
    # Per experiment, not per attempt: without the attempt label a retry neither deletes nor duplicates them.
    experiment_labels = {k: v for k, v in common.items() if k != ATTEMPT_LABEL}
    access = trainer_access(profile, name, namespace, experiment_labels, roce=roce)
    objects = (*access, plan_config_map(plan, names.plan_config_map, meta), *workloads)
    warning = RUNTIMES[runtime].warning(carry)
    return Rendered(
        runtime=runtime,
        names=names,
        plan=plan,
        objects=objects,
        reason=choice.reason,
        warnings=(warning,) if warning else (),
    )


class _ManifestDumper(yaml.SafeDumper):
    """Block style for multi-line strings, so the plan JSON in the ConfigMap stays reviewable;
    no anchors/aliases (Master and Worker templates are equal, and must read as two templates)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _str)


def manifests_yaml(objects: tuple[Obj, ...] | list[Obj]) -> str:
    """Multi-document YAML in creation order, keys in the order Kubernetes users expect."""
    return yaml.dump_all(objects, Dumper=_ManifestDumper, sort_keys=False, explicit_start=True, width=120)
