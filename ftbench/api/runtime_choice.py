"""Which runtime carries a spec on a cluster, and what a cluster cannot run: one answer for
`ftbench validate`, `ftbench render` and the operator.

These decisions used to live in the render step only, so a spec that validation called valid
ended Invalid (NotRunnable) once the operator rendered it. Now validation asks the same functions
(`profile_refusals`), and the render step uses them as its backstop: whatever refuses, refuses
with the same field, rule and fix. Where no cluster fact is needed (a runtime the spec names
itself), `rules_runtime` states the refusal as a rule with its CEL twin, so `kubectl apply` refuses
it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ftbench.api import effective
from ftbench.api.fabric import roce_refusal
from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import AttentionImplementation, Runtime


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime an attempt runs on and why (the operator writes both into status.runtime)."""

    runtime: Runtime
    reason: str


def preferred_runtime(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> RuntimeChoice:
    """spec.run.runtime, else the profile's pin, else auto-detection: the runtime preferred before
    `runtime_refusal` checks that it can carry the spec.

    auto: Job for one node; for several, Kubeflow Trainer v2 (TrainJob) where its CRDs and the
    profile's ClusterTrainingRuntime exist, since Kueue queues TrainJobs but is dropping
    PyTorchJob (not where the profile names a schedulerName, which a TrainJob cannot patch); else the v1
    training operator (PyTorchJob); else an Indexed Job. Several trials
    (the stability experiment) run as an Indexed Job of sequential pods.
    """
    if spec.run.runtime != Runtime.AUTO:
        return RuntimeChoice(spec.run.runtime, f"spec.run.runtime is {spec.run.runtime.value}")
    if profile.runtime != Runtime.AUTO:
        return RuntimeChoice(profile.runtime, f"the cluster profile pins runtime {profile.runtime.value}")
    features = profile.features
    if spec.number_nodes == 1 and effective.trials(spec, catalog) == 1:
        return RuntimeChoice(Runtime.JOB, "auto: one node")
    if spec.number_nodes == 1 and spec.target_precision_percent and effective.is_repeated(spec, catalog):
        return RuntimeChoice(Runtime.JOB, "auto: repeats that may stop at targetPrecisionPercent run one Job each")
    if spec.number_nodes > 1 and features.trainer_v2 and not profile.scheduler_name:
        runtime = profile.train_job.runtime_name
        return RuntimeChoice(
            Runtime.TRAIN_JOB, f"auto: Kubeflow Trainer v2 and ClusterTrainingRuntime {runtime} are installed"
        )
    if spec.number_nodes > 1 and features.training_operator:
        return RuntimeChoice(
            Runtime.PYTORCH_JOB, "auto: the Kubeflow training operator (PyTorchJob) is installed, Trainer v2 is not"
        )
    if features.indexed_jobs:
        what = "sequential trials" if spec.number_nodes == 1 else "several nodes, no Kubeflow training operator"
        return RuntimeChoice(Runtime.INDEXED_JOB, f"auto: {what}")
    return RuntimeChoice(Runtime.JOB, "auto: the cluster has no Indexed Jobs")


@dataclass(frozen=True)
class Carry:
    """What decides whether a runtime can carry a spec and how it is built."""

    spec: FineTuneExperimentSpec
    profile: ClusterProfile
    trials: int  # sequential runs in fresh pods (stability trials, repeats); 1 otherwise
    chosen: str  # "spec.run.runtime X means Y here (why)": the start of most refusals
    reason: str  # why this runtime: the spec, the profile's pin, or what auto-detection found

    @classmethod
    def of(cls, spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> Carry:
        choice = preferred_runtime(spec, catalog, profile)
        chosen = f"spec.run.runtime {spec.run.runtime.value} means {choice.runtime.value} here ({choice.reason})"
        return cls(spec, profile, effective.trials(spec, catalog), chosen, choice.reason)


Refusal = Callable[[Carry], str | None]


def multi_node_fix(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str:
    """What to change so several nodes can run: a runtime this cluster has (auto, unless the profile
    pins a runtime), or one node."""
    features = profile.features
    runtimes = [r for r, on in (("auto", profile.runtime == Runtime.AUTO), ("IndexedJob", features.indexed_jobs),
                                ("PyTorchJob", features.training_operator), ("TrainJob", features.trainer_v2)) if on]  # fmt: skip
    if len(runtimes) > int(profile.runtime == Runtime.AUTO):
        named = ", ".join(runtimes[:-1]) + (" or " if len(runtimes) > 1 else "") + runtimes[-1]
        return f"set spec.run.runtime to {named}, or {_one_node(spec, profile)}"
    return (
        "this cluster has no multi-node runtime: install the Kubeflow training operator (PyTorchJob) or "
        "Kubeflow Trainer v2 (TrainJob), or upgrade to Kubernetes >= 1.24 for Indexed Jobs, then restart the "
        f"operator; or {_one_node(spec, profile)}"
    )


def _node_gpus(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> int | None:
    """The most GPUs one pod of ``spec`` may ask for here (cluster profile gpusPerNode); None: no limit."""
    return None if effective.uses_cpu(spec) else profile.gpus_per_node


def _one_node(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str:
    """The one-node fix, within what a node of this cluster holds (else gpus_per_node_refusal answers it)."""
    most = _node_gpus(spec, profile)
    if most is None or spec.number_gpus <= most:
        return f"set spec.numberNodes to 1 (with {spec.number_gpus} GPUs on one node)"
    return (
        f"set spec.numberNodes to 1 and spec.numberGpus to at most {most} (a node of this cluster has {most}: "
        "cluster profile gpusPerNode)"
    )


def job_refusal(c: Carry) -> str | None:
    if c.spec.number_nodes == 1:
        return None
    return f"{c.chosen}, which runs one pod, but spec.numberNodes is {c.spec.number_nodes}; " + multi_node_fix(
        c.spec, c.profile
    )


def indexed_job_repeats_refusal(c: Carry) -> str | None:
    """Repeats that may stop at their precision target need one Job each; an Indexed Job runs them all."""
    if not (c.spec.target_precision_percent and (c.spec.repeats or 1) > 1):
        return None
    return (
        f"{c.chosen}, which runs all {c.spec.repeats} repeats in one Job, so they could not stop at "
        "targetPrecisionPercent; set spec.run.runtime to auto or Job (one Job per repeat)"
    )


def indexed_job_refusal(c: Carry) -> str | None:
    if (refused := indexed_job_repeats_refusal(c)) is not None:
        return refused
    if c.profile.features.indexed_jobs:
        return None
    return (
        f"{c.chosen}, but this cluster has no Indexed Jobs (they need Kubernetes >= 1.24; cluster profile "
        "features.indexedJobs is false); " + multi_node_fix(c.spec, c.profile)
    )


def pytorch_job_refusal(c: Carry) -> str | None:
    if c.trials == 1:
        return None
    runs = f"repeats {c.trials} run" if c.spec.repeats else f"{c.spec.experiment.value} runs {c.trials}"
    return (
        f"{c.chosen}, but {runs} sequential trials in fresh pods, which a PyTorchJob cannot; set "
        "spec.run.runtime to IndexedJob, Job or TrainJob"
    )


def train_job_refusal(c: Carry) -> str | None:
    if c.profile.scheduler_name:
        return (
            f"{c.chosen}, but the cluster profile's schedulerName {c.profile.scheduler_name} cannot be patched into a "
            "TrainJob's pods (Trainer v2 runtime patches have no schedulerName); set it in the ClusterTrainingRuntime's "
            "pod template and leave the profile's unset, or choose spec.run.runtime IndexedJob or PyTorchJob"
        )
    if not c.spec.run.priority_class_name:
        return None
    return (
        "spec.run.priorityClassName cannot be set on a TrainJob (Trainer v2 runtime patches have no "
        f"priorityClassName; {c.reason}); set the priority class in the ClusterTrainingRuntime or "
        "through Kueue (kueue.x-k8s.io/priority-class), or choose spec.run.runtime IndexedJob or PyTorchJob"
    )


#: Why each runtime cannot carry a spec (render.registry's RuntimeDef holds the same function).
REFUSALS: dict[Runtime, Refusal] = {
    Runtime.JOB: job_refusal,
    Runtime.INDEXED_JOB: indexed_job_refusal,
    Runtime.PYTORCH_JOB: pytorch_job_refusal,
    Runtime.TRAIN_JOB: train_job_refusal,
}


def runtime_refusal(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> str | None:
    """Why the runtime this spec gets on this cluster cannot carry it; None when it can."""
    carry = Carry.of(spec, catalog, profile)
    return REFUSALS[preferred_runtime(spec, catalog, profile).runtime](carry)


def flash_attention_refusal(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """flash_attention_2 asked for where the images carry no flash-attn (the profile says so)."""
    if spec.attention_implementation != AttentionImplementation.FLASH_ATTENTION_2 or profile.flash_attention:
        return None
    return (
        "attentionImplementation flash_attention_2 needs the flash-attn package, but the trainer has none: the "
        "cluster profile says the images are built without it (flashAttention false), or, on this machine, the "
        "interpreter that trains cannot import flash_attn; set attentionImplementation to sdpa or auto, or "
        "install flash-attn there"
    )


@dataclass(frozen=True)
class ProfileRefusal:
    rule_id: str
    field: str
    message: str


def gpus_per_node_refusal(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """More GPUs in one pod than a node of this cluster has: the pod would stay Pending forever."""
    most = _node_gpus(spec, profile)
    per_node = spec.number_gpus // spec.number_nodes
    if most is None or per_node <= most:
        return None
    nodes = next(k for k in range(-(-spec.number_gpus // most), spec.number_gpus + 1) if spec.number_gpus % k == 0)
    return (
        f"numberGpus {spec.number_gpus} on numberNodes {spec.number_nodes} asks for {per_node} GPUs in one pod, but "
        f"a node of this cluster has at most {most} (cluster profile gpusPerNode), so the pod would never be "
        f"scheduled; set numberNodes to {nodes}, or numberGpus to at most {most * spec.number_nodes}"
    )


def profile_refusals(spec: FineTuneExperimentSpec, catalog: Catalog, profile: ClusterProfile) -> list[ProfileRefusal]:
    """What this cluster cannot run of a spec that passed every rule: more GPUs per pod than its nodes
    have, the runtime it gets here, what the images lack. Validation reports them (with the profile) before anything is rendered."""
    found = []
    if (problem := roce_refusal(spec, profile)) is not None:
        found.append(ProfileRefusal("profile.no-roce", "run.requireRoce", problem))
    if (problem := gpus_per_node_refusal(spec, profile)) is not None:
        found.append(ProfileRefusal("profile.gpus-per-node", "numberGpus", problem))
    if (problem := runtime_refusal(spec, catalog, profile)) is not None:
        found.append(ProfileRefusal("profile.runtime", "run.runtime", problem))
    if (problem := flash_attention_refusal(spec, profile)) is not None:
        found.append(ProfileRefusal("profile.flash-attention", "attentionImplementation", problem))
    return found
