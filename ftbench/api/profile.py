"""The cluster profile: everything cluster-specific, kept out of experiments.

One YAML document (Helm values -> ConfigMap for the operator; `--profile FILE` for the CLI). The
defaults work on a plain GPU cluster; docs/reference/cluster-profile.md is generated from these fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ftbench.api.api_model import ApiModel
from ftbench.api.bounds import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    IMAGE_REPOSITORY,
    IMAGE_TAG,
    MAX_GPUS,
    QUANTITY,
    DnsSubdomain,
    LabelValue,
    PriorityClassName,
    QualifiedName,
    Quantity,
    ResourceName,
)
from ftbench.api.calibration import Calibration
from ftbench.catalog import Catalog, load_catalog
from ftbench.contracts.enums import Engine, Runtime

DEFAULT_TRAINER_IMAGE = "ghcr.io/ftbench/trainer"
# A C identifier, as environment variable names in pod specs should be.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# A model-map reference is a Hugging Face id or a path; it becomes a trainer argument, so it may
# not start with '-' (it would read as a flag) and holds no spaces or shell characters.
MODEL_REF = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./:@+-]{0,511}$")
# A Multus network: a NetworkAttachmentDefinition name, optionally with its namespace.
MULTUS_NETWORK = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class Toleration(ApiModel):
    """A pod toleration, as in the Kubernetes API (camelCase keys)."""

    key: QualifiedName | None = Field(None, description="Taint key; unset with operator Exists tolerates every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal.")
    value: LabelValue | None = Field(None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="NoSchedule, PreferNoSchedule or NoExecute; unset matches all."
    )
    toleration_seconds: int | None = Field(None, description="NoExecute only: how long the pod stays bound.")


class Images(ApiModel):
    """Trainer images: one tag per engine and fms-hf-tuning version (Dockerfile.trainer build args)."""

    repository: Annotated[str, Field(max_length=255, pattern=IMAGE_REPOSITORY)] = Field(
        DEFAULT_TRAINER_IMAGE, description="Trainer image repository (registry host, then lowercase path components)."
    )
    fms_hf_tuning_tag: str = Field(
        "fms-hf-tuning-{version}",
        max_length=128,
        description="Tag for engine fms-hf-tuning; {version} is spec.fmsHfTuningVersion (each release must give a "
        "valid tag).",
    )
    trl_tag: Annotated[str, Field(pattern=IMAGE_TAG)] = Field("trl", description="Tag for engine trl.")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy of the training pods."
    )
    pull_secrets: list[DnsSubdomain] = Field(default_factory=list, description="imagePullSecrets names.")

    @field_validator("fms_hf_tuning_tag")
    @classmethod
    def _tag_per_release(cls, value: str) -> str:
        """Every release the API offers must name a valid tag (refused at load, not at a pull)."""
        from ftbench.engines.releases import FMS_HF_TUNING_VERSIONS

        for version in FMS_HF_TUNING_VERSIONS:
            try:
                tag = value.format(version=version)
            except (KeyError, IndexError, ValueError) as err:
                raise ValueError(f"{value!r} is not a tag template: only {{version}} may be used ({err})") from err
            if not re.match(IMAGE_TAG, tag):
                raise ValueError(
                    f"{value!r} gives {tag!r} for release {version}, not an image tag (letters, digits, '_', '.', '-', "
                    "at most 128, not starting with '.' or '-')"
                )
        return value

    def image_for(self, engine: Engine, fms_version: str) -> str:
        tag = self.trl_tag if engine == Engine.TRL else self.fms_hf_tuning_tag.format(version=fms_version)
        return f"{self.repository}:{tag}"


class Volume(ApiModel):
    """A volume of the training pods: a PersistentVolumeClaim, or scratch space."""

    claim_name: DnsSubdomain | None = Field(None, description="PVC name; unset uses an emptyDir (scratch, not shared).")
    mount_path: str = Field(pattern=r"^/[^:]*$", max_length=1024, description="Where the pods see it (absolute path).")
    read_only: bool = Field(False, description="Mount read-only.")


class Storage(ApiModel):
    models: Volume = Field(
        default_factory=lambda: Volume(claim_name="hf-models-pvc", mount_path="/hf-models-pvc"),
        description="Model weights (seed 001's hf-models-pvc). Catalog paths are relative to modelRoot. Writable "
        "by default because hfHome (seed 002) lives on it and Hugging Face writes its cache and locks there; "
        "set readOnly when hfHome points elsewhere.",
    )
    data: Volume = Field(
        default_factory=lambda: Volume(claim_name="ray-disorch-storage", mount_path="/data"),
        description="Datasets (seed 001's ray-disorch-storage); generated files are written here once.",
    )
    model_root: str = Field("/hf-models-pvc", description="Catalog model paths are resolved under this directory.")
    data_dir: str = Field(
        "/data/fms-hf-tuning/artificial-dataset", description="Dataset directory (seed 002's data_directory)."
    )
    hf_home: str = Field("/hf-models-pvc/huggingface_home", description="HF_HOME (seed 002's hf_home).")

    @model_validator(mode="after")
    def _mounts_and_caches(self) -> Storage:
        """Two volumes at one path are refused by the API server; a cache on a read-only volume fails the
        first run (datasets writes its cache and locks under HF_HOME, the dataset files under dataDir)."""
        if self.models.mount_path.rstrip("/") == self.data.mount_path.rstrip("/"):
            raise ValueError(
                f"storage.models and storage.data are both mounted at {self.models.mount_path}: the API server refuses "
                "two volumes at one mountPath; give storage.data another mountPath (and dataDir under it)"
            )
        for name, path in (("hfHome", self.hf_home), ("dataDir", self.data_dir)):
            for volume_name, volume in (("models", self.models), ("data", self.data)):
                if volume.read_only and _under(path, volume.mount_path):
                    raise ValueError(
                        f"storage.{name} {path} lies on storage.{volume_name} ({volume.mount_path}), which is readOnly, "
                        f"but the trainer writes there (Hugging Face's cache and locks, the generated datasets); set "
                        f"storage.{name} to a writable path (e.g. under storage.data or /tmp), or "
                        f"storage.{volume_name}.readOnly to false"
                    )
        return self


class Roce(ApiModel):
    """RDMA over Converged Ethernet (seed 002, 'Configure your RayCluster for RoCE')."""

    network: Annotated[str, Field(max_length=253, pattern=MULTUS_NETWORK)] | None = Field(
        None, description="Multus network for k8s.v1.cni.cncf.io/networks (name or namespace/name)."
    )
    device_resource: ResourceName = Field("nvidia.com/roce_gdr", description="RDMA device resource name.")
    device_count: Annotated[int, Field(ge=1)] = Field(2, description="RDMA devices per pod.")
    run_as_root: bool = Field(
        True,
        description="Run RoCE pods as root (UID 0). RDMA memory registration needs IPC_LOCK, and Kubernetes makes an "
        "added capability effective for a root process only; set false where the nodes' container runtime raises "
        "the memlock limit for non-root pods. Either way the pods keep seccomp RuntimeDefault and drop every "
        "capability but IPC_LOCK.",
    )
    topology_config_map: DnsSubdomain | None = Field(
        None, description="ConfigMap with the NCCL topology, mounted at /var/run/nvidia-topologyd."
    )
    service_account: DnsSubdomain | None = Field(
        None,
        description="ServiceAccount allowed to run as root with IPC_LOCK (seed 002's `roce`); unset: serviceAccount.",
    )
    nccl_env: dict[EnvName, str] = Field(
        default_factory=lambda: {
            "NCCL_IB_HCA": "mlx5",
            "NCCL_IB_GID_INDEX": "3",
            # Seed 002's tuning values ("remaining NCCL environment variables we use on our cluster").
            "NCCL_IB_QPS_PER_CONNECTION": "8",
            "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
            "NCCL_IB_PCI_RELAXED_ORDERING": "1",
            "NCCL_ALGO": "Ring",
            "NCCL_IGNORE_CPU_AFFINITY": "1",
            "NCCL_SOCKET_NTHREADS": "2",
            "NCCL_CROSS_NIC": "0",
        },
        description="NCCL variables for RoCE runs (NCCL_IB_HCA, NCCL_IB_GID_INDEX, tuning ones from seed 002); "
        "a profile that sets it replaces the whole default. NCCL_IB_DISABLE is always 0 on RoCE runs and 1 on "
        "other multi-node runs.",
    )


class TrainJobSettings(ApiModel):
    """Kubeflow Trainer v2: the runtime ftbench's TrainJobs reference and patch."""

    runtime_name: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        "torch-distributed",
        description="ClusterTrainingRuntime the TrainJobs reference (spec.runtimeRef); the operator prefers "
        "TrainJob only when it exists. It must use the torch mlPolicy (the PET_* rendezvous env) and have the "
        "replicated job `replicatedJob` with a container named `node`, as Trainer's torch-distributed does.",
    )
    replicated_job: Annotated[str, Field(max_length=20, pattern=DNS_LABEL)] = Field(
        "node",
        description="Name of the runtime's trainer replicated job, the target of ftbench's runtime patch "
        "(volumes, security, node selection, labels and annotations of the pods).",
    )


class Features(ApiModel):
    """What the cluster supports; gates fields older Kubernetes versions would drop or reject."""

    training_operator: bool = Field(False, description="Kubeflow training operator (PyTorchJob) installed.")
    trainer_v2: bool = Field(
        False,
        description="Kubeflow Trainer v2 installed: the TrainJob CRD and the ClusterTrainingRuntime "
        "trainJob.runtimeName exist. The operator detects it when the profile leaves features unset.",
    )
    indexed_jobs: bool = Field(True, description="Indexed Jobs (Kubernetes >= 1.24).")
    pod_failure_policy: bool = Field(True, description="Job podFailurePolicy (Kubernetes >= 1.31).")
    backoff_limit_per_index: bool = Field(
        False,
        description="Job backoffLimitPerIndex/maxFailedIndexes (Kubernetes >= 1.33): a failed stability trial "
        "pod does not stop the next ones even when it dies before the trainer can report.",
    )

    @classmethod
    def for_kubernetes(cls, minor: int, *, training_operator: bool = False, trainer_v2: bool = False) -> Features:
        """The features of Kubernetes 1.`minor` (the operator calls this with the server's version)."""
        return cls(
            training_operator=training_operator,
            trainer_v2=trainer_v2,
            indexed_jobs=minor >= 24,
            pod_failure_policy=minor >= 31,
            backoff_limit_per_index=minor >= 33,
        )


class Security(ApiModel):
    """Pod security of training pods when RoCE does not need root (restricted Pod Security Standard)."""

    run_as_user: Annotated[int, Field(ge=1)] = Field(1000, description="Non-root UID of the trainer.")
    run_as_group: Annotated[int, Field(ge=0)] = Field(1000, description="GID of the trainer.")
    fs_group: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="fsGroup for writable PVCs; unset by default because Kubernetes then chowns whole "
        "volumes (slow on large model PVCs); set with fsGroupChangePolicy OnRootMismatch.",
    )


class GpuMemory(ApiModel):
    """One GPU model's memory as a prediction compares with it (docs/measurements.md)."""

    capacity: Annotated[str, Field(pattern=QUANTITY)] = Field(
        description="Device memory as NVML reports it (nvidia-smi's total), e.g. 81559Mi for an H100 80GB HBM3."
    )
    runtime_overhead: Annotated[str, Field(pattern=QUANTITY)] = Field(
        "1720Mi",
        description="The CUDA context, its libraries' workspaces and the allocator's first segments that every training "
        "process holds beyond its tensors: the `context` term of the device-level prediction (docs/measurements.md, "
        '"Device memory"). The default is what ado\'s fleet of A100 runs fits (bench/fleet.py fit: 1.68 GiB); '
        "calibrate it for another GPU or stack as nvidia-smi's used memory minus max_memory_reserved of a real run.",
    )


# nvidia.com/gpu.product label values (GPU feature discovery) and their NVML totals.
DEFAULT_GPU_MEMORY: dict[str, GpuMemory] = {
    "NVIDIA-A100-SXM4-80GB": GpuMemory(capacity="81920Mi"),
    "NVIDIA-A100-80GB-PCIe": GpuMemory(capacity="81920Mi"),
    "NVIDIA-A100-SXM4-40GB": GpuMemory(capacity="40960Mi"),
    "NVIDIA-H100-80GB-HBM3": GpuMemory(capacity="81559Mi"),
    "NVIDIA-H100-PCIe": GpuMemory(capacity="81559Mi"),
    "NVIDIA-H200": GpuMemory(capacity="143771Mi"),
    "NVIDIA-L40S": GpuMemory(capacity="46068Mi"),
    "Tesla-V100-SXM2-32GB": GpuMemory(capacity="32768Mi"),
    "NVIDIA-A10G": GpuMemory(capacity="23028Mi"),
    "NVIDIA-GeForce-RTX-3090": GpuMemory(capacity="24576Mi"),
}


class ClusterProfile(ApiModel):
    """Everything cluster-specific that the manifests need; experiments never carry any of it."""

    images: Images = Field(default_factory=Images, description="Trainer images per engine and fms-hf-tuning version.")
    gpu_resource: ResourceName = Field("nvidia.com/gpu", description="Extended resource name of a GPU.")
    gpu_node_label: QualifiedName = Field(
        "nvidia.com/gpu.product", description="Node label compared with spec.gpuModel."
    )
    node_selector: dict[QualifiedName, LabelValue] = Field(
        default_factory=dict, description="Extra node selector for training pods."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations for training pods.")
    scheduler_name: DnsSubdomain | None = Field(
        None,
        description="schedulerName of training pods: a second scheduler that places them (Volcano, scheduler-plugins' "
        "coscheduling, the ftbench test rig's kube-scheduler). Unset: the cluster's default-scheduler. A TrainJob "
        "cannot patch it (set it in the ClusterTrainingRuntime's pod template): a profile that sets it refuses the "
        "TrainJob runtime.",
    )
    default_memory: Quantity = Field("64Gi", description="Memory request/limit when spec.run.memory is unset.")
    cpu_per_gpu: Annotated[int, Field(ge=1)] = Field(2, description="CPU cores per GPU (seed 001: 2, min 2).")
    min_cpu: Annotated[int, Field(ge=1)] = Field(2, description="Minimum CPU cores per pod.")
    cpu_per_cpu_rank: Annotated[int, Field(ge=1)] = Field(
        1, description="CPU cores a pod requests per CPU rank (experiments with device cpu)."
    )
    shm_size: Annotated[str, Field(pattern=QUANTITY)] | None = Field(
        None, description="sizeLimit of the /dev/shm memory emptyDir; unset: no limit beyond the pod's memory."
    )
    security: Security = Field(
        default_factory=Security, description="Non-root pod security (RoCE runs may need root: roce.runAsRoot)."
    )
    pod_labels: dict[QualifiedName, LabelValue] = Field(
        default_factory=dict, description="Extra labels on training pods."
    )
    pod_annotations: dict[QualifiedName, str] = Field(
        default_factory=dict, description="Extra annotations on training pods."
    )
    storage: Storage = Field(
        default_factory=Storage, description="Volumes for model weights and datasets, HF_HOME, catalog roots."
    )
    fabric: Literal["auto", "RoCE", "InfiniBand", "none"] = Field(
        "auto",
        description="The network between the nodes. RoCE: enableRoce runs get the RoCE network (roce.network), RDMA "
        "devices and NCCL settings. InfiniBand: NCCL uses it on every multi-node run (enableRoce has nothing to "
        "attach). none: multi-node runs use TCP sockets (NCCL_IB_DISABLE=1). auto: RoCE where roce.network is set, "
        "else unknown: NCCL uses what the nodes have. An enableRoce run on a cluster without RoCE runs on the "
        "fabric there is, with a warning, unless run.requireRoce refuses it (docs/roce.md).",
    )
    roce: Roce = Field(default_factory=Roce, description="RDMA over Converged Ethernet for multi-node runs (seed 002).")
    features: Features = Field(
        default_factory=Features,
        description="What the cluster supports (Kubernetes version, training operator, Trainer v2).",
    )
    runtime: Runtime = Field(
        Runtime.AUTO,
        description="What spec.run.runtime auto means on this cluster. auto: Job for one node; for several, "
        "TrainJob when features.trainerV2, else PyTorchJob when features.trainingOperator, else IndexedJob; "
        "stability trials as an Indexed Job (or one Job each). Any other value pins that runtime for every "
        "experiment that leaves spec.run.runtime at auto (TrainJob: one TrainJob per stability trial).",
    )
    train_job: TrainJobSettings = Field(
        default_factory=TrainJobSettings, description="Kubeflow Trainer v2 TrainJobs: the runtime they use."
    )
    service_account: DnsSubdomain | None = Field(
        None,
        description="ServiceAccount of training pods. Unset (recommended): with reportProgress the operator creates "
        "one per experiment, `<experiment>-trainer`, whose Role may patch only that experiment's status. Set: the "
        "pods use this existing account and the per-experiment Role is bound to it, so experiments sharing it can "
        "patch each other's status.progress while they exist.",
    )
    allowed_priority_classes: list[PriorityClassName] | None = Field(
        None,
        description="PriorityClasses spec.run.priorityClassName may name; any other is refused. Unset: every class "
        "except system-* (system-node-critical and system-cluster-critical preempt the cluster's own components).",
    )
    pending_deadline_seconds: Annotated[int, Field(ge=1)] | None = Field(
        1800,
        description="A run whose pods have not started this many seconds after its workload was created "
        "(no pod created, unschedulable, image pull back-off) fails with the last reason. Unset: wait forever.",
    )
    report_progress: bool = Field(
        True,
        description="Trainer rank 0 patches status.progress, with the experiment's own ServiceAccount and Role that "
        "the operator creates. false: no account or Role is created and Job and PyTorchJob pods mount no API token.",
    )
    flash_attention: bool = Field(True, description="Images carry flash-attn (seed: use_flash_attn True on GPUs).")
    gpus_per_node: Annotated[int, Field(ge=1, le=MAX_GPUS)] | None = Field(
        8,
        description="The most GPUs one node has: a spec asking for more in one pod (numberGpus / numberNodes) is "
        "refused, since that pod would never be scheduled. Unset: not checked.",
    )
    master_port: Annotated[int, Field(ge=1, le=65535)] = Field(29500, description="Rendezvous port.")
    expected_bus_bandwidth_gbps: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="The bus bandwidth (GB/s, nccl-tests' busbw) the inter-node network should reach: a network "
        "preflight whose peak busbw is below half of it sets condition NetworkAsExpected=False with reason "
        "LowBusBandwidth (docs/roce.md). Unset: not checked.",
    )
    gpu_memory: dict[str, GpuMemory] = Field(
        default_factory=lambda: dict(DEFAULT_GPU_MEMORY),
        description="Per GPU model (spec.gpuModel, the gpuNodeLabel value): its memory and the runtime overhead a "
        "memory prediction adds. Replaces the default table (A100, H100, H200, L40S, V100, A10G, RTX 3090) when set.",
    )
    calibration: Calibration | None = Field(
        None,
        description="Corrections this cluster's own runs fitted to the fleet-fitted predictions (`ftbench calibrate "
        "--profile FILE` writes it): per GPU family, fabric and model, with the runs they came from. Predictions "
        "that use it name it (status.prediction.calibration).",
    )
    model_map: dict[str, dict[str, str] | str] = Field(
        default_factory=dict,
        description="Seed 002 model_map: {model: {Vanilla: id-or-path, GPTQ-Quantized: ...}}, or ado's "
        "shorthand {model: id-or-path} for the Vanilla weights.",
    )

    @field_validator("model_map")
    @classmethod
    def _model_map_applies(cls, value: dict[str, dict[str, str] | str]) -> dict[str, dict[str, str] | str]:
        """Reject a bad map when the profile is loaded, not when an experiment first uses it."""
        for name, variants in value.items():
            refs = variants.values() if isinstance(variants, dict) else (variants,)
            bad = [v for v in (name, *refs) if not MODEL_REF.match(v)]
            if bad:
                raise ValueError(
                    f"model_map.{name}: {bad[0]!r} is not a model name, Hugging Face id or path (letters, digits, "
                    "'_', '.', '/', ':', '@', '+', '-', not starting with '-', at most 512 characters)"
                )
        load_catalog().with_model_map(value)
        return value


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount + "/") or mount == "/"


def catalog_for(profile: ClusterProfile, base: Catalog | None = None) -> Catalog:
    """The catalog this cluster sees: the shipped one with the profile's model map on top."""
    catalog = base or load_catalog()
    return catalog.with_model_map(profile.model_map) if profile.model_map else catalog
