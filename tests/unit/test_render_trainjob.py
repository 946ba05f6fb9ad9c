"""Kubeflow Trainer v2: the TrainJob runtime, auto-detection, the profile pin and the PET_* contract."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile, Features
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts import env as E
from ftbench.contracts.enums import Runtime
from ftbench.contracts.labels import DNS_LABEL_MAX
from ftbench.render.manifests import RenderError, render_experiment
from ftbench.render.trainjob import NODE_CONTAINER, PATCH_MANAGER
from tests.unit.render_cases import A100, CASES, TRAINJOB_ROCE_PROFILE

CATALOG = load_catalog()
STABILITY = "finetune_full_stability-v1.0.0"
MULTI = {"numberGpus": 16, "numberNodes": 2}


def spec(**kw: Any) -> FineTuneExperimentSpec:
    base = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 8, "batchSize": 8, "gpuModel": A100}
    return FineTuneExperimentSpec.model_validate(base | kw)


def render(s: FineTuneExperimentSpec, profile: dict[str, Any] | None = None, **kw: Any):
    return render_experiment(s, CATALOG, ClusterProfile.model_validate(profile or {}), name="exp", **kw)


def train_jobs(objects: tuple[dict, ...]) -> list[dict]:
    return [o for o in objects if o["kind"] == "TrainJob"]


def pod_patch(job: dict) -> dict:
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]


# ---- auto-detection: every combination of installed CRDs ----


@pytest.mark.parametrize(
    ("trainer_v2", "training_operator", "indexed_jobs", "runtime", "why"),
    [
        (True, True, True, Runtime.TRAIN_JOB, "Trainer v2"),
        (True, False, True, Runtime.TRAIN_JOB, "ClusterTrainingRuntime torch-distributed"),
        (False, True, True, Runtime.PYTORCH_JOB, "training operator"),
        (False, False, True, Runtime.INDEXED_JOB, "no Kubeflow training operator"),
        (True, True, False, Runtime.TRAIN_JOB, "Trainer v2"),
        (False, True, False, Runtime.PYTORCH_JOB, "PyTorchJob"),
    ],
)
def test_auto_prefers_trainjob_then_pytorchjob_then_indexed_job(
    trainer_v2: bool, training_operator: bool, indexed_jobs: bool, runtime: Runtime, why: str
) -> None:
    features = {"trainerV2": trainer_v2, "trainingOperator": training_operator, "indexedJobs": indexed_jobs}
    rendered = render(spec(**MULTI), {"features": features})
    assert rendered.runtime == runtime
    assert why in rendered.reason and rendered.reason.startswith("auto:")


def test_auto_keeps_job_for_one_node_and_indexed_job_for_trials() -> None:
    features = {"features": {"trainerV2": True, "trainingOperator": True}}
    assert render(spec(), features).runtime == Runtime.JOB
    assert render(spec(experiment=STABILITY), features).runtime == Runtime.INDEXED_JOB


def test_profile_pins_a_runtime_and_the_spec_overrides_it() -> None:
    pinned = {"runtime": "TrainJob"}
    one = render(spec(), pinned)
    assert one.runtime == Runtime.TRAIN_JOB and "pins runtime TrainJob" in one.reason
    assert render(spec(**MULTI), {"runtime": "IndexedJob", "features": {"trainerV2": True}}).runtime == (
        Runtime.INDEXED_JOB
    )
    explicit = render(spec(run={"runtime": "PyTorchJob"}), pinned)
    assert explicit.runtime == Runtime.PYTORCH_JOB and explicit.reason == "spec.run.runtime is PyTorchJob"


def test_priority_class_cannot_be_patched_into_a_trainjob() -> None:
    with pytest.raises(RenderError, match=r"spec\.run\.priorityClassName .* TrainJob"):
        render(spec(run={"priorityClassName": "high"}), {"runtime": "TrainJob"})


def test_features_detected_from_the_server() -> None:
    assert Features.for_kubernetes(33, trainer_v2=True).trainer_v2
    assert not Features.for_kubernetes(33).trainer_v2


# ---- the TrainJob ----


def test_trainjob_shape() -> None:
    rendered = render(spec(**MULTI, run={"activeDeadlineSeconds": 60, "queueName": "team-a"}), {"runtime": "TrainJob"})
    (job,) = train_jobs(rendered.objects)
    assert [o["kind"] for o in rendered.objects] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "TrainJob"]
    js = job["spec"]
    assert js["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    assert js["activeDeadlineSeconds"] == 60
    # Kueue: the queue label on the TrainJob, created suspended (Kueue unsuspends it on admission).
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and js["suspend"] is True
    trainer = js["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["command"] == ["ftbench-trainer", "--plan", "/etc/ftbench/plan.json"]
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert E.NCCL_IB_DISABLE not in env and env[E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO] == "true"  # fabric unknown
    assert not E.TRAINJOB_RESERVED & env.keys()  # Trainer's webhook refuses TrainJobs that set them
    (patch,) = js["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    pod = pod_patch(job)
    assert pod["metadata"]["labels"]["ftbench.io/experiment"] == "exp"
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": A100}
    (container,) = pod["spec"]["containers"]
    assert container["name"] == NODE_CONTAINER
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
    assert volumes[mounts["/etc/ftbench"]]["configMap"]["name"] == rendered.names.plan_config_map
    assert rendered.plan.rendezvous.source == "trainjob"
    assert rendered.names.master_host == "exp-a0-node-0-0.exp-a0"


def test_trainjob_roce() -> None:
    s = spec(**MULTI, enableRoce=True, run={"ncclDebug": True})
    (job,) = train_jobs(render(s, TRAINJOB_ROCE_PROFILE).objects)
    pod = pod_patch(job)
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "multi-nic-network"
    assert pod["spec"]["securityContext"]["runAsUser"] == 0 and pod["spec"]["serviceAccountName"] == "roce"
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "/var/run/nvidia-topologyd" in {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    trainer = job["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/roce_gdr"] == "2"
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3" and env[E.NCCL_IB_DISABLE] == "0" and env[E.NCCL_DEBUG] == "INFO"


def test_stability_runs_one_trainjob_per_trial() -> None:
    rendered = render(spec(experiment=STABILITY), {"runtime": "TrainJob"})
    jobs = train_jobs(rendered.objects)
    assert [j["metadata"]["name"] for j in jobs] == [f"exp-a0-t{i}" for i in range(5)] == list(rendered.names.workloads)
    for i, job in enumerate(jobs):
        assert job["metadata"]["labels"]["ftbench.io/trial"] == str(i)
        assert pod_patch(job)["metadata"]["labels"]["ftbench.io/trial"] == str(i)
        env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
        assert env[E.FTBENCH_TRIAL_INDEX] == str(i) and env[E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO] == "true"
        assert job["spec"]["trainer"]["numNodes"] == 1
    assert rendered.plan.rendezvous.source == "local"


def test_trainjob_pod_hostnames_fit_a_dns_label() -> None:
    long = "x" * 40 + "." + "y" * 200
    rendered = render_experiment(spec(**MULTI), CATALOG, ClusterProfile(runtime=Runtime.TRAIN_JOB), name=long)
    (job,) = train_jobs(rendered.objects)
    # JobSet pod hostname: <trainjob>-<replicatedJob>-<jobIndex>-<podIndex>, numberNodes <= 1024.
    assert len(f"{job['metadata']['name']}-node-0-1023") <= DNS_LABEL_MAX


# ---- the PET_* contract the trainer reads ----


def test_node_placement_trainjob() -> None:
    (plan,) = [c.render().plan for c in CASES if c.name == "full-fsdp-2node-trainjob-roce"]
    env = {
        E.TRAINJOB_NODE_RANK: "1",
        E.TRAINJOB_NUM_NODES: "2",
        E.TRAINJOB_NPROC_PER_NODE: "8",
        E.TRAINJOB_MASTER_ADDR: "j-node-0-0.j",
        E.TRAINJOB_MASTER_PORT: "29400",
    }
    assert E.node_placement(plan, env) == E.NodePlacement(1, 2, "j-node-0-0.j", 29400)
    with pytest.raises(E.RendezvousEnvError, match="PET_NPROC_PER_NODE=4 but the plan runs 8"):
        E.node_placement(plan, {**env, E.TRAINJOB_NPROC_PER_NODE: "4"})
    with pytest.raises(E.RendezvousEnvError, match="PET_NODE_RANK is not set"):
        E.node_placement(plan, {k: v for k, v in env.items() if k != E.TRAINJOB_NODE_RANK})
