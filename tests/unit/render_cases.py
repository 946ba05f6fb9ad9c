"""The experiments the render tests cover, each with the cluster profile it is rendered for.

Shared by the golden, schema, dry-run and fms-parser tests so they all look at the same objects.
Golden YAML lives in tests/golden/render/<case>.yaml; `FTBENCH_UPDATE_GOLDEN=1 pytest
tests/unit/test_render_golden.py` rewrites it (review the diff before committing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.render.manifests import Rendered, render_experiment

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden" / "render"
A100 = "NVIDIA-A100-SXM4-80GB"

# A RoCE cluster as seed 002 describes it (Multus network, roce_gdr devices, topology ConfigMap).
ROCE_PROFILE: dict[str, Any] = {
    "features": {"trainingOperator": True},
    "serviceAccount": "ftbench-trainer",
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "roce": {
        "network": "multi-nic-network",
        "topologyConfigMap": "topology-roce",
        "serviceAccount": "roce",
        "ncclEnv": {"NCCL_IB_HCA": "=mlx5_0,mlx5_3", "NCCL_IB_GID_INDEX": "1", "NCCL_ALGO": "Ring"},
    },
}
OLD_CLUSTER_PROFILE: dict[str, Any] = {"features": {"indexedJobs": False, "podFailurePolicy": False}}
# The same RoCE cluster on a current Kubeflow stack: Trainer v2 installed next to the v1 operator.
TRAINJOB_ROCE_PROFILE: dict[str, Any] = {**ROCE_PROFILE, "features": {"trainingOperator": True, "trainerV2": True}}
# A cluster that pins TrainJob for everything (Kueue queues TrainJobs, not PyTorchJobs).
TRAINJOB_PINNED_PROFILE: dict[str, Any] = {"runtime": "TrainJob", "trainJob": {"runtimeName": "ftbench-torch"}}


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    profile: dict[str, Any] = field(default_factory=dict)
    namespace: str = "bench"

    def render(self) -> Rendered:
        spec = FineTuneExperimentSpec.model_validate(self.spec)
        profile = ClusterProfile.model_validate(self.profile)
        return render_experiment(
            spec, load_catalog(), profile, name=self.name, namespace=self.namespace, uid="", attempt=0
        )

    @property
    def golden(self) -> Path:
        return GOLDEN_DIR / f"{self.name}.yaml"


def _spec(experiment: str, model: str, gpus: int, batch: int, **extra: Any) -> dict[str, Any]:
    return {
        "experiment": experiment,
        "model": model,
        "modelMaxLength": 4096,
        "numberGpus": gpus,
        "batchSize": batch,
        "gpuModel": A100 if gpus else "",
        **extra,
    }


FULL = "finetune_full_benchmark-v1.0.0"
ROCE_2NODE_70B = _spec(
    FULL,
    "llama3.1-70b",
    16,
    16,
    numberNodes=2,
    enableRoce=True,
    run={"ncclDebug": True, "queueName": "gpu-queue", "activeDeadlineSeconds": 7200},
)
CASES: tuple[Case, ...] = (
    Case("lora-1gpu", _spec("finetune_lora_benchmark-v1.0.0", "llama3.1-8b", 1, 4)),
    Case("full-fsdp-8gpu", _spec(FULL, "llama3.1-8b", 8, 16, run={"memory": "200Gi"})),
    Case("full-ddp-8gpu", _spec(FULL, "granite-3.1-2b", 8, 8, distributedBackend="DDP")),
    # Seed 001's DP: one process drives the node's 4 GPUs (torch DataParallel), no accelerate.
    Case("full-dp-4gpu", _spec(FULL, "granite-3.1-2b", 4, 8, distributedBackend="None")),
    Case(
        "full-fsdp-2node-pytorchjob-roce",
        ROCE_2NODE_70B,
        ROCE_PROFILE,
    ),
    Case("full-fsdp-2node-indexedjob", _spec(FULL, "llama3.1-8b", 16, 16, numberNodes=2)),
    Case(
        "gptq-lora-2gpu",
        _spec("finetune_gtpq-lora_benchmark-v1.0.0", "mistral-7b-v0.1", 2, 4, fmsHfTuningVersion="2.8.2"),
    ),
    Case("prompt-tuning-4gpu", _spec("finetune_pt_benchmark-v1.0.0", "llama3.1-8b", 4, 8)),
    Case("stability-8gpu", _spec("finetune_full_stability-v1.0.0", "llama3.1-8b", 8, 8)),
    Case(
        "stability-jobs-old-cluster", _spec("finetune_full_stability-v1.0.0", "llama3.1-8b", 8, 8), OLD_CLUSTER_PROFILE
    ),
    Case("lora-cpu", _spec("finetune_lora_benchmark-v1.0.0", "smollm2-135m", 0, 2, fmsHfTuningVersion="3.1.0")),
    Case(
        "full-fsdp-2node-trainjob-roce",
        ROCE_2NODE_70B,
        TRAINJOB_ROCE_PROFILE,
    ),
    Case(
        "stability-trainjob",
        _spec("finetune_full_stability-v1.0.0", "llama3.1-8b", 8, 8, run={"queueName": "gpu-queue"}),
        TRAINJOB_PINNED_PROFILE,
    ),
)
CASE_IDS = [c.name for c in CASES]


def update_golden() -> bool:
    return os.environ.get("FTBENCH_UPDATE_GOLDEN") == "1"


def shared_dir() -> Path:
    """The shared fixtures directory: FTBENCH_SHARED_DIR, else <repo>/../shared."""
    return Path(os.environ.get("FTBENCH_SHARED_DIR", REPO.parent / "shared"))


def pytorchjob_crd_path() -> Path:
    return shared_dir() / "fixtures" / "kubeflow" / "kubeflow.org_pytorchjobs.v1.9.2.yaml"


def trainer_v2_dir() -> Path:
    """The upstream Kubeflow Trainer v2.3.0 CRDs and torch-distributed runtime."""
    return shared_dir() / "fixtures" / "kubeflow" / "trainer-v2.3.0"


def trainjob_crd_path() -> Path:
    return trainer_v2_dir() / "trainer.kubeflow.org_trainjobs.yaml"
