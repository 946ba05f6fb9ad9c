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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from ftbench.api import effective
from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime
from ftbench.contracts.labels import (
    APP_NAME,
    ATTEMPT_LABEL,
    EXPERIMENT_LABEL,
    EXPERIMENT_NAME_ANNOTATION,
    MANAGED_BY_LABEL,
    RUNTIME_ANNOTATION,
    label_value,
)
from ftbench.contracts.plan import PLAN_FILENAME, ExperimentRef, LaunchPlan
from ftbench.render.access import pod_account, trainer_access
from ftbench.render.names import ChildNames, child_names
from ftbench.render.plan import PlanError, RuntimeChoice, build_plan, choose_runtime_for
from ftbench.render.pods import PodInputs, uses_roce
from ftbench.render.runtimes import (
    WorkloadMeta,
    multi_node_indexed_job,
    pytorch_job,
    single_job,
    stability_indexed_job,
    stability_jobs,
)
from ftbench.render.trainjob import stability_train_jobs, train_job

Obj = dict[str, Any]


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
    """`choose_runtime_for`, plus the combinations no runtime can carry out."""
    choice = choose_runtime_for(spec, catalog, profile)
    runtime = choice.runtime
    trials = effective.trials(spec, catalog)
    chosen = f"spec.run.runtime {spec.run.runtime.value} means {runtime.value} here ({choice.reason})"
    if runtime == Runtime.JOB and spec.number_nodes > 1:
        raise RenderError(
            f"{chosen}, which runs one pod, but spec.numberNodes is {spec.number_nodes}; "
            + _multi_node_fix(spec, profile)
        )
    if runtime == Runtime.INDEXED_JOB and not profile.features.indexed_jobs:
        raise RenderError(
            f"{chosen}, but this cluster has no Indexed Jobs (they need Kubernetes >= 1.24; cluster profile "
            "features.indexedJobs is false); " + _multi_node_fix(spec, profile)
        )
    if runtime == Runtime.PYTORCH_JOB and trials > 1:
        raise RenderError(
            f"{chosen}, but "
            + (f"repeats {trials} run" if spec.repeats else f"{spec.experiment.value} runs {trials}")
            + " sequential trials in fresh pods, which a PyTorchJob cannot; set spec.run.runtime to IndexedJob, "
            "Job or TrainJob"
        )
    if runtime == Runtime.TRAIN_JOB and spec.run.priority_class_name:
        raise RenderError(
            "spec.run.priorityClassName cannot be set on a TrainJob (Trainer v2 runtime patches have no "
            f"priorityClassName; {choice.reason}); set the priority class in the ClusterTrainingRuntime or "
            "through Kueue (kueue.x-k8s.io/priority-class), or choose spec.run.runtime IndexedJob or PyTorchJob"
        )
    return choice


def _multi_node_fix(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str:
    """What to change so several nodes can run: a runtime this cluster has, or one node."""
    if profile.features.training_operator or profile.features.trainer_v2:
        runtimes = [r for r, on in (("PyTorchJob", profile.features.training_operator),
                                    ("TrainJob", profile.features.trainer_v2)) if on]  # fmt: skip
        return f"set spec.run.runtime to {' or '.join(runtimes)}, or spec.numberNodes to 1"
    return (
        "this cluster has no multi-node runtime: install the Kubeflow training operator (PyTorchJob) or "
        "Kubeflow Trainer v2 (TrainJob), or upgrade to Kubernetes >= 1.24 for Indexed Jobs, then restart the "
        f"operator; or set spec.numberNodes to 1 (with up to {spec.number_gpus} GPUs on one node)"
    )


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


Builder = Callable[[PodInputs, WorkloadMeta, ChildNames], list[Obj]]


def _builder(runtime: Runtime, spec: FineTuneExperimentSpec, trials: int) -> Builder:
    if runtime == Runtime.TRAIN_JOB:
        return stability_train_jobs if trials > 1 else train_job
    if trials > 1:
        return stability_indexed_job if runtime == Runtime.INDEXED_JOB else stability_jobs
    if runtime == Runtime.PYTORCH_JOB:
        return pytorch_job
    if runtime == Runtime.INDEXED_JOB and spec.number_nodes > 1:
        return multi_node_indexed_job
    return single_job


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
    trials = effective.trials(spec, catalog)
    names = _names(spec, profile, name, attempt, runtime, trials)
    plan = build_plan(
        spec,
        catalog,
        profile,
        ref=ExperimentRef(name=name, namespace=namespace, uid=uid, attempt=attempt),
        runtime=runtime,
        master_host=names.master_host,
        dataset_entries=dataset_entries,
        report_progress_to_kubernetes=profile.report_progress,
    )
    common = labels(name, attempt)
    meta = WorkloadMeta(
        namespace=namespace,
        labels=common,
        annotations={EXPERIMENT_NAME_ANNOTATION: name, RUNTIME_ANNOTATION: runtime.value},
        queue_name=spec.run.queue_name,
        active_deadline_seconds=spec.run.active_deadline_seconds,
    )
    roce = uses_roce(spec)
    inputs = PodInputs(
        spec=spec,
        plan=plan,
        profile=profile,
        image=profile.images.image_for(spec.engine.value, spec.fms_hf_tuning_version),
        plan_config_map=names.plan_config_map,
        labels=common,
        service_account=pod_account(profile, name, roce=roce),
    )
    workloads = _builder(runtime, spec, trials)(inputs, meta, names)
    # Per experiment, not per attempt: without the attempt label a retry neither deletes nor duplicates them.
    experiment_labels = {k: v for k, v in common.items() if k != ATTEMPT_LABEL}
    access = trainer_access(profile, name, namespace, experiment_labels, roce=roce)
    objects = (*access, plan_config_map(plan, names.plan_config_map, meta), *workloads)
    return Rendered(runtime=runtime, names=names, plan=plan, objects=objects, reason=choice.reason)


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
