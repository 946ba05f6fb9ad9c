"""The training pod template shared by every runtime (Job, Indexed Job, PyTorchJob, TrainJob).

One builder, so the GPU requests, volumes, security and NCCL settings cannot drift between
runtimes; the runtimes only add what is theirs (container name, rank env, ports, subdomain).
Pure data in, Kubernetes dicts out.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ftbench.api import effective
from ftbench.api.fabric import nccl_ib_disable, uses_roce
from ftbench.api.profile import ClusterProfile, Volume
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts import env as E
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import ATTEMPT_LABEL, EXPERIMENT_LABEL
from ftbench.contracts.live_metrics import METRICS_PORT_NAME
from ftbench.contracts.plan import PLAN_FILENAME, PLAN_MOUNT_DIR, LaunchPlan

TRAINER_COMMAND = ("ftbench-trainer", "--plan", posixpath.join(PLAN_MOUNT_DIR, PLAN_FILENAME))
TOPOLOGY_MOUNT_DIR = "/var/run/nvidia-topologyd"
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"  # the well-known label every kubelet sets
NCCL_DEBUG_ENV = {E.NCCL_DEBUG: "INFO", E.NCCL_DEBUG_SUBSYS: "INIT,BOOTSTRAP,ENV"}


@dataclass(frozen=True)
class PodInputs:
    """Everything a pod template depends on, resolved once by `ftbench.render.manifests`."""

    spec: FineTuneExperimentSpec
    plan: LaunchPlan
    profile: ClusterProfile
    image: str
    plan_config_map: str
    labels: dict[str, str]
    # The pods' ServiceAccount (`ftbench.render.access.pod_account`); None: the namespace default.
    service_account: str | None = None

    @property
    def roce(self) -> bool:
        return uses_roce(self.spec, self.profile)


@dataclass(frozen=True)
class RuntimeSlot:
    """What one runtime adds to the shared template.

    `reports_progress`: the pods may be rank 0 and so need an API token; False for pods that
    never are (PyTorchJob workers), which then mount none."""

    container_name: str
    env: tuple[Obj, ...] = ()
    ports: tuple[Obj, ...] = ()
    subdomain: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    reports_progress: bool = True


def field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def completion_index_env(name: str) -> Obj:
    """An Indexed Job's index through the downward API (works before 1.22 injected it)."""
    return field_env(name, f"metadata.annotations['{E.JOB_COMPLETION_INDEX_ANNOTATION}']")


def resources(inputs: PodInputs) -> Obj:
    """Seed 001: 2 CPU cores per GPU, at least 2; GPUs and RDMA devices in requests and limits.
    With device cpu, the profile's cores per CPU rank for each of the node's ranks instead."""
    profile, spec = inputs.profile, inputs.spec
    gpus = effective.gpus_per_node(spec)
    cores = profile.cpu_per_gpu * gpus
    if effective.uses_cpu(spec):
        cores = profile.cpu_per_cpu_rank * effective.processes_per_node(spec)
    amounts: Obj = {
        "cpu": str(max(profile.min_cpu, cores)),
        "memory": spec.run.memory or profile.default_memory,
    }
    if gpus:
        amounts[profile.gpu_resource] = str(gpus)
    if inputs.roce:
        amounts[profile.roce.device_resource] = str(profile.roce.device_count)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def nccl_env(inputs: PodInputs) -> dict[str, str]:
    """RoCE: the profile's NCCL settings; NCCL_IB_DISABLE as the fabric says (`fabric.nccl_ib_disable`)."""
    values: dict[str, str] = dict(inputs.profile.roce.nccl_env) if inputs.roce else {}
    if (ib_disable := nccl_ib_disable(inputs.spec, inputs.profile)) is not None:
        values[E.NCCL_IB_DISABLE] = ib_disable
    if inputs.spec.run.nccl_debug:
        values |= NCCL_DEBUG_ENV
    return values


def container_env(inputs: PodInputs, slot: RuntimeSlot) -> list[Obj]:
    base = [
        {"name": E.FTBENCH_IMAGE, "value": inputs.image},
        field_env(E.FTBENCH_POD_NAME, "metadata.name"),
        field_env(E.FTBENCH_NAMESPACE, "metadata.namespace"),
        field_env(E.FTBENCH_POD_IP, "status.podIP"),
    ]
    if inputs.plan.hf_home:
        base.append({"name": E.HF_HOME, "value": inputs.plan.hf_home})
    nccl = [{"name": k, "value": v} for k, v in nccl_env(inputs).items()]
    return [*base, *slot.env, *nccl]


def _storage_volume(name: str, volume: Volume) -> Obj:
    if volume.claim_name:
        return {"name": name, "persistentVolumeClaim": {"claimName": volume.claim_name, "readOnly": volume.read_only}}
    return {"name": name, "emptyDir": {}}


def volumes(inputs: PodInputs) -> tuple[list[Obj], list[Obj]]:
    """Plan, model weights, datasets, /dev/shm (memory), scratch output, RoCE topology."""
    storage = inputs.profile.storage
    shm: Obj = {"medium": "Memory"}
    if inputs.profile.shm_size:
        shm["sizeLimit"] = inputs.profile.shm_size
    vols: list[Obj] = [
        {"name": "plan", "configMap": {"name": inputs.plan_config_map}},
        _storage_volume("models", storage.models),
        _storage_volume("data", storage.data),
        {"name": "dshm", "emptyDir": shm},
        {"name": "output", "emptyDir": {}},
    ]
    mounts: list[Obj] = [
        {"name": "plan", "mountPath": PLAN_MOUNT_DIR, "readOnly": True},
        {"name": "models", "mountPath": storage.models.mount_path, "readOnly": storage.models.read_only},
        {"name": "data", "mountPath": storage.data.mount_path, "readOnly": storage.data.read_only},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "output", "mountPath": inputs.plan.output.dir},
    ]
    topology = inputs.profile.roce.topology_config_map
    if inputs.roce and topology:
        vols.append({"name": "nccl-topology", "configMap": {"name": topology}})
        mounts.append({"name": "nccl-topology", "mountPath": TOPOLOGY_MOUNT_DIR, "readOnly": True})
    return vols, mounts


def security(inputs: PodInputs) -> tuple[Obj, Obj]:
    """(pod, container) security contexts: restricted, with IPC_LOCK added on RoCE runs.

    Every pod keeps seccomp RuntimeDefault and drops ALL capabilities; RoCE adds back IPC_LOCK
    only (pinning RDMA memory). Root only where the profile says the RDMA device needs it
    (`roce.runAsRoot`): Kubernetes gives added capabilities to a root process, while a non-root
    process gets them only as far as the container runtime passes ambient capabilities, so
    non-root RoCE relies on the node's memlock limit instead."""
    container: Obj = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], **({"add": ["IPC_LOCK"]} if inputs.roce else {})},
    }
    seccomp = {"seccompProfile": {"type": "RuntimeDefault"}}
    if inputs.roce and inputs.profile.roce.run_as_root:
        return {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0, "fsGroup": 0, **seccomp}, container
    sec = inputs.profile.security
    pod: Obj = {"runAsNonRoot": True, "runAsUser": sec.run_as_user, "runAsGroup": sec.run_as_group, **seccomp}
    if sec.fs_group is not None:
        pod |= {"fsGroup": sec.fs_group, "fsGroupChangePolicy": "OnRootMismatch"}
    return pod, container


def scheduling(inputs: PodInputs) -> Obj:
    """Node selection on the GPU model, the profile's selectors, tolerations and scheduler, priority; a multi-node
    run's pods on distinct nodes."""
    profile, spec = inputs.profile, inputs.spec
    selector = dict(profile.node_selector)
    if effective.gpus_per_node(spec) > 0 and spec.gpu_model:
        selector[profile.gpu_node_label] = spec.gpu_model
    out: Obj = {}
    if selector:
        out["nodeSelector"] = selector
    if spec.number_nodes > 1:
        out["affinity"] = one_pod_per_node(inputs.labels)
    if profile.tolerations:
        out["tolerations"] = [t.to_wire() for t in profile.tolerations]
    if profile.scheduler_name:
        out["schedulerName"] = profile.scheduler_name
    if spec.run.priority_class_name:
        out["priorityClassName"] = spec.run.priority_class_name
    if inputs.service_account:
        out["serviceAccountName"] = inputs.service_account
    if profile.images.pull_secrets:
        out["imagePullSecrets"] = [{"name": n} for n in profile.images.pull_secrets]
    return out


def one_pod_per_node(labels: dict[str, str]) -> Obj:
    """numberNodes N means N nodes: the attempt's pods repel each other per hostname. Without it a scheduler
    may put two of them on one node that has room for both (2 x 4 GPUs on an 8-GPU node), and the run measures
    NVLink where the spec asked for the network between nodes."""
    attempt = {k: labels[k] for k in (EXPERIMENT_LABEL, ATTEMPT_LABEL) if k in labels}
    term = {"labelSelector": {"matchLabels": attempt}, "topologyKey": HOSTNAME_TOPOLOGY}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pod_metadata(inputs: PodInputs, slot: RuntimeSlot) -> Obj:
    """Labels the operator selects pods by; the profile's annotations and the RoCE network."""
    annotations = dict(inputs.profile.pod_annotations)
    if inputs.roce and inputs.profile.roce.network:
        annotations[MULTUS_ANNOTATION] = inputs.profile.roce.network
    metadata: Obj = {"labels": {**inputs.profile.pod_labels, **inputs.labels, **slot.labels}}
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def pod_template(inputs: PodInputs, slot: RuntimeSlot) -> Obj:
    """The pod template every runtime embeds; restartPolicy Never (a retry is a new attempt)."""
    vols, mounts = volumes(inputs)
    pod_security, container_security = security(inputs)
    container: Obj = {
        "name": slot.container_name,
        "image": inputs.image,
        "imagePullPolicy": inputs.profile.images.pull_policy,
        "command": list(TRAINER_COMMAND),
        "env": container_env(inputs, slot),
        "resources": resources(inputs),
        "volumeMounts": mounts,
        "securityContext": container_security,
        # The trainer writes its result here; on a crash the log tail explains it instead.
        "terminationMessagePath": inputs.plan.output.termination_message_path,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    ports = list(slot.ports)
    if inputs.plan.output.metrics_port is not None:  # every rank serves its live metrics (the trainer PodMonitor's)
        ports.append({"name": METRICS_PORT_NAME, "containerPort": inputs.plan.output.metrics_port, "protocol": "TCP"})
    if ports:
        container["ports"] = ports
    spec: Obj = {
        "restartPolicy": "Never",
        **scheduling(inputs),
        "securityContext": pod_security,
        "containers": [container],
        "volumes": vols,
    }
    if slot.subdomain:
        spec["subdomain"] = slot.subdomain
    if not (inputs.profile.report_progress and slot.reports_progress):
        spec["automountServiceAccountToken"] = False  # no API token where nothing reports
    return {"metadata": pod_metadata(inputs, slot), "spec": spec}
