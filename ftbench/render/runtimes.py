"""The workload objects of each runtime: Job, Indexed Job + headless Service, PyTorchJob.

No runtime retries a failed pod (`backoffLimit: 0`): a failure is a measurement (GPU OOM) or a
reason to look, and a retry would change what was measured. The operator starts a new attempt
when it wants one. Stability trials are the exception that proves it: each trial is its own
fresh pod, and a failed trial must not stop the next one (see `ftbench.contracts.env`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ftbench.contracts import env as E
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import TRIAL_LABEL
from ftbench.contracts.results import EXIT_GPU_OOM
from ftbench.render.names import ChildNames
from ftbench.render.pods import PodInputs, RuntimeSlot, completion_index_env, pod_template

TRAINER_CONTAINER = "trainer"
# The training operator requires this container name, and reads MASTER_PORT from this port name.
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class WorkloadMeta:
    """Metadata and run limits every workload object shares."""

    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    queue_name: str | None
    active_deadline_seconds: int | None

    def metadata(self, name: str, extra_labels: dict[str, str] | None = None, *, queued: bool = True) -> Obj:
        """queued: the object Kueue admits (the workload), which carries the queue label."""
        labels = {**self.labels, **(extra_labels or {})}
        if queued and self.queue_name:
            labels[KUEUE_QUEUE_LABEL] = self.queue_name
        meta: Obj = {"name": name}
        if self.namespace:
            meta["namespace"] = self.namespace
        meta["labels"] = labels
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return meta

    def limits(self) -> Obj:
        """activeDeadlineSeconds, and suspend so Kueue admits the workload (it unsuspends it)."""
        out: Obj = {}
        if self.active_deadline_seconds:
            out["activeDeadlineSeconds"] = self.active_deadline_seconds
        if self.queue_name:
            out["suspend"] = True
        return out


def _job(meta: WorkloadMeta, name: str, spec: Obj, template: Obj, extra_labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.metadata(name, extra_labels),
        "spec": {**spec, **meta.limits(), "template": template},
    }


def oom_failure_policy(container: str) -> Obj:
    """Fail the Job at once on the trainer's GPU OOM exit code: the Job's Failed condition then
    has reason PodFailurePolicy, so the OOM is visible without reading pods."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": container, "operator": "In", "values": [EXIT_GPU_OOM]},
            }
        ]
    }


def single_job(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """One pod on one node."""
    spec: Obj = {"backoffLimit": 0, "completions": 1, "parallelism": 1}
    if inputs.profile.features.pod_failure_policy:
        spec["podFailurePolicy"] = oom_failure_policy(TRAINER_CONTAINER)
    template = pod_template(inputs, RuntimeSlot(TRAINER_CONTAINER))
    return [_job(meta, names.workloads[0], spec, template)]


def headless_service(meta: WorkloadMeta, names: ChildNames, port: int) -> Obj:
    """DNS for `<job>-<index>.<service>`, resolvable before the pods are ready (rendezvous)."""
    assert names.service is not None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(names.service, queued=False),
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": names.workloads[0]},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def multi_node_indexed_job(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """One pod per node; rank = completion index; master `<job>-0.<service>`."""
    nodes = inputs.spec.number_nodes
    spec: Obj = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": 0,
    }
    if inputs.profile.features.pod_failure_policy:
        spec["podFailurePolicy"] = oom_failure_policy(TRAINER_CONTAINER)
    port = inputs.profile.master_port
    slot = RuntimeSlot(
        TRAINER_CONTAINER,
        env=(completion_index_env(E.JOB_COMPLETION_INDEX),),
        ports=({"name": "rendezvous", "containerPort": port, "protocol": "TCP"},),
        subdomain=names.service,
    )
    job = _job(meta, names.workloads[0], spec, pod_template(inputs, slot))
    return [headless_service(meta, names, port), job]


def trial_env(index: int | None) -> tuple[Obj, ...]:
    """The trial this pod runs (a literal, or the completion index when None); failures exit 0."""
    trial = (
        completion_index_env(E.FTBENCH_TRIAL_INDEX)
        if index is None
        else {"name": E.FTBENCH_TRIAL_INDEX, "value": str(index)}
    )
    return (trial, {"name": E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO, "value": "true"})


def stability_indexed_job(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """The trials as one Indexed Job of sequential fresh pods (completions = trials, parallelism 1).

    The trainer exits 0 after a failed trial (FTBENCH_TRIAL_FAILURE_EXIT_ZERO); where the cluster
    has backoffLimitPerIndex, a pod that dies outright only fails its own index as well.
    """
    trials = inputs.plan.trials
    spec: Obj = {"completionMode": "Indexed", "completions": trials, "parallelism": 1}
    if inputs.profile.features.backoff_limit_per_index:
        spec |= {"backoffLimitPerIndex": 0, "maxFailedIndexes": trials}
    else:
        spec["backoffLimit"] = 0
    template = pod_template(inputs, RuntimeSlot(TRAINER_CONTAINER, env=trial_env(None)))
    return [_job(meta, names.workloads[0], spec, template)]


def stability_jobs(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """The trials as one Job each, for clusters without Indexed Jobs.

    Applied together they would run at once: the operator creates `names.workloads` one at a time,
    each after the previous one finished, to keep the trials sequential. Each Job carries the
    run's activeDeadlineSeconds, so there it limits a trial rather than the whole run.
    """
    spec: Obj = {"backoffLimit": 0, "completions": 1, "parallelism": 1}
    return [
        _job(
            meta,
            job_name,
            spec,
            pod_template(inputs, RuntimeSlot(TRAINER_CONTAINER, env=trial_env(i), labels={TRIAL_LABEL: str(i)})),
            {TRIAL_LABEL: str(i)},
        )
        for i, job_name in enumerate(names.workloads)
    ]


def pytorch_job(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """Kubeflow PyTorchJob: Master + (nodes - 1) Workers; the operator injects RANK/MASTER_ADDR."""
    port = inputs.profile.master_port
    slot = RuntimeSlot(
        PYTORCH_CONTAINER, ports=({"name": PYTORCH_PORT_NAME, "containerPort": port, "protocol": "TCP"},)
    )
    replicas: Obj = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": pod_template(inputs, slot)}}
    if inputs.spec.number_nodes > 1:
        replicas["Worker"] = {  # never rank 0: no progress reports, no API token
            "replicas": inputs.spec.number_nodes - 1,
            "restartPolicy": "Never",
            "template": pod_template(inputs, replace(slot, reports_progress=False)),
        }
    # cleanPodPolicy None keeps finished pods: their termination messages carry the results.
    run_policy: Obj = {"cleanPodPolicy": "None", "backoffLimit": 0, **meta.limits()}
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": meta.metadata(names.workloads[0]),
            "spec": {
                "nprocPerNode": str(inputs.plan.topology.processes_per_node),
                "runPolicy": run_policy,
                "pytorchReplicaSpecs": replicas,
            },
        }
    ]
