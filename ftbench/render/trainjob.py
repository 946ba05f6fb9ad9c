"""Kubeflow Trainer v2: a `TrainJob` (trainer.kubeflow.org/v1alpha1) on a ClusterTrainingRuntime.

Checked against the v2.3.0 CRDs and the `torch-distributed` runtime (shared fixtures). A TrainJob
does not carry a pod template: the runtime does, and the TrainJob overrides it in two places,
`spec.trainer` (the runtime's `node` container) and `spec.runtimePatches` (one entry owned by manager
`ftbench.io/operator`). ftbench does not run torchrun: the trainer maps the torch plugin's PET_ values
onto `accelerate launch`. What the patch API cannot express stays the runtime's.

Design notes: docs/design-notes.md, "ftbench/render/trainjob.py".
"""

from __future__ import annotations

from ftbench.contracts import env as E
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import TRIAL_LABEL
from ftbench.render.names import ChildNames
from ftbench.render.pods import (
    TRAINER_COMMAND,
    PodInputs,
    RuntimeSlot,
    container_env,
    pod_metadata,
    resources,
    scheduling,
    security,
)
from ftbench.render.pods import volumes as pod_volumes
from ftbench.render.runtimes import WorkloadMeta, trial_env

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API_VERSION = f"{TRAINER_GROUP}/v1alpha1"
RUNTIME_KIND = "ClusterTrainingRuntime"
# JobSet labels the pods of its Jobs with its name, which is the TrainJob's (how the operator finds them).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The container Trainer's torch plugin configures (env, PET_* values, resources, image, command).
NODE_CONTAINER = "node"
PATCH_MANAGER = "ftbench.io/operator"


def _pod_patch(inputs: PodInputs, slot: RuntimeSlot) -> Obj:
    """The runtime patch of the trainer pods: every pod-template setting TrainJob allows to patch."""
    vols, mounts = pod_volumes(inputs)
    pod_security, container_security = security(inputs)
    sched = scheduling(inputs)
    spec: Obj = {
        key: sched[key]
        for key in ("nodeSelector", "affinity", "tolerations", "serviceAccountName", "imagePullSecrets")
        if key in sched
    }
    spec |= {
        "securityContext": pod_security,
        "containers": [{"name": NODE_CONTAINER, "securityContext": container_security, "volumeMounts": mounts}],
        "volumes": vols,
    }
    return {"metadata": pod_metadata(inputs, slot), "spec": spec}


def _train_job(inputs: PodInputs, meta: WorkloadMeta, name: str, slot: RuntimeSlot) -> Obj:
    profile = inputs.profile
    replicated_job = {
        "name": profile.train_job.replicated_job,
        "template": {"spec": {"template": _pod_patch(inputs, slot)}},
    }
    trainer: Obj = {
        "image": inputs.image,
        "command": list(TRAINER_COMMAND),
        "numNodes": inputs.spec.number_nodes,
        "numProcPerNode": inputs.plan.topology.processes_per_node,
        "resourcesPerNode": resources(inputs),
        "env": container_env(inputs, slot),
    }
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": "TrainJob",
        "metadata": meta.metadata(name, slot.labels),
        "spec": {
            "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": RUNTIME_KIND, "name": profile.train_job.runtime_name},
            **meta.limits(),
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
                }
            ],
        },
    }


def train_job(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """One TrainJob for the run (any number of nodes)."""
    exit_zero = ({"name": E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO, "value": "true"},)
    return [_train_job(inputs, meta, names.workloads[0], RuntimeSlot(NODE_CONTAINER, env=exit_zero))]


def stability_train_jobs(inputs: PodInputs, meta: WorkloadMeta, names: ChildNames) -> list[Obj]:
    """One TrainJob per trial; the operator creates each after the previous one finished."""
    return [
        _train_job(inputs, meta, name, RuntimeSlot(NODE_CONTAINER, env=trial_env(i), labels={TRIAL_LABEL: str(i)}))
        for i, name in enumerate(names.workloads)
    ]
