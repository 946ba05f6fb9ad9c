"""What the issue asks of the manifests, one property at a time (the golden files show the whole)."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile, Features
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts import env as E
from ftbench.contracts.enums import Runtime
from ftbench.contracts.labels import DNS_LABEL_MAX, attempt_selector, fit
from ftbench.contracts.plan import PLAN_FILENAME, PLAN_MOUNT_DIR, LaunchPlan
from ftbench.contracts.results import EXIT_GPU_OOM
from ftbench.render.access import ACCESS_KINDS
from ftbench.render.manifests import (
    RenderError,
    experiment_names,
    render_experiment,
)
from ftbench.render.names import child_names
from ftbench.render.plan import PlanError
from tests.unit.render_cases import A100, CASES, ROCE_PROFILE

CATALOG = load_catalog()
FULL = "finetune_full_benchmark-v1.0.0"
STABILITY = "finetune_full_stability-v1.0.0"


def spec(**kw: Any) -> FineTuneExperimentSpec:
    base = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 8, "batchSize": 8, "gpuModel": A100}
    return FineTuneExperimentSpec.model_validate(base | kw)


def render(s: FineTuneExperimentSpec, profile: dict[str, Any] | None = None, **kw: Any):
    return render_experiment(s, CATALOG, ClusterProfile.model_validate(profile or {}), name="exp", **kw)


def of_kind(objects: tuple[dict, ...], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def pod_specs(objects: tuple[dict, ...]) -> list[dict]:
    out = [o["spec"]["template"]["spec"] for o in of_kind(objects, "Job")]
    for job in of_kind(objects, "PyTorchJob"):
        out += [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return out


def env_of(pod: dict) -> dict[str, Any]:
    (container,) = pod["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ---- runtimes ----


@pytest.mark.parametrize(
    ("kw", "profile", "runtime", "kinds"),
    [
        ({}, {}, Runtime.JOB, ["ConfigMap", "Job"]),
        ({"numberGpus": 16, "numberNodes": 2}, {}, Runtime.INDEXED_JOB, ["ConfigMap", "Service", "Job"]),
        (
            {"numberGpus": 16, "numberNodes": 2},
            {"features": {"trainingOperator": True}},
            Runtime.PYTORCH_JOB,
            ["ConfigMap", "PyTorchJob"],
        ),
        ({"experiment": STABILITY}, {}, Runtime.INDEXED_JOB, ["ConfigMap", "Job"]),
        ({"experiment": STABILITY}, {"features": {"indexedJobs": False}}, Runtime.JOB, ["ConfigMap"] + ["Job"] * 5),
    ],
)
def test_auto_runtime_and_objects(kw: dict, profile: dict, runtime: Runtime, kinds: list[str]) -> None:
    rendered = render(spec(**kw), profile)
    assert rendered.runtime == runtime
    assert [o["kind"] for o in rendered.objects] == [*ACCESS_KINDS, *kinds]
    names = {o["metadata"]["name"] for o in rendered.objects if o["kind"] not in ACCESS_KINDS}
    assert names == set(rendered.names.all)


def test_indexed_job_multi_node() -> None:
    rendered = render(spec(numberGpus=16, numberNodes=2))
    (svc,) = of_kind(rendered.objects, "Service")
    (job,) = of_kind(rendered.objects, "Job")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    js = job["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"], js["backoffLimit"]) == ("Indexed", 2, 2, 0)
    assert js["template"]["spec"]["subdomain"] == svc["metadata"]["name"]
    assert rendered.plan.rendezvous.source == "indexedjob"
    assert rendered.plan.rendezvous.master_host == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    env = env_of(js["template"]["spec"])
    assert env[E.JOB_COMPLETION_INDEX]["fieldRef"]["fieldPath"].endswith(f"['{E.JOB_COMPLETION_INDEX_ANNOTATION}']")
    assert E.NCCL_IB_DISABLE not in env  # fabric unknown (the default profile): NCCL uses what the nodes have


def test_pytorchjob_shape() -> None:
    rendered = render(
        spec(numberGpus=16, numberNodes=2, run={"activeDeadlineSeconds": 60}), {"features": {"trainingOperator": True}}
    )
    (job,) = of_kind(rendered.objects, "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 1
    assert job["spec"]["nprocPerNode"] == "8"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 0, "activeDeadlineSeconds": 60}
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["ports"][0]["name"] == "pytorchjob-port"
    assert replicas["Master"]["template"] is not replicas["Worker"]["template"]
    assert rendered.plan.rendezvous.source == "pytorchjob"


def test_pod_failure_policy_only_when_supported() -> None:
    (job,) = of_kind(render(spec()).objects, "Job")
    (rule,) = job["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [EXIT_GPU_OOM]
    assert rule["onExitCodes"]["containerName"] == job["spec"]["template"]["spec"]["containers"][0]["name"]
    (old,) = of_kind(render(spec(), {"features": {"podFailurePolicy": False}}).objects, "Job")
    assert "podFailurePolicy" not in old["spec"] and old["spec"]["backoffLimit"] == 0


def test_stability_trials_are_sequential_pods() -> None:
    rendered = render(spec(experiment=STABILITY))
    (job,) = of_kind(rendered.objects, "Job")
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (5, 1)
    assert "podFailurePolicy" not in job["spec"]  # an OOM is a measurement here
    env = env_of(job["spec"]["template"]["spec"])
    assert "fieldRef" in env[E.FTBENCH_TRIAL_INDEX] and env[E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO] == "true"
    assert rendered.plan.rendezvous.source == "local" and rendered.plan.trials == 5

    per_index = render(spec(experiment=STABILITY), {"features": {"backoffLimitPerIndex": True}})
    (job,) = of_kind(per_index.objects, "Job")
    assert job["spec"]["backoffLimitPerIndex"] == 0 and job["spec"]["maxFailedIndexes"] == 5
    assert "backoffLimit" not in job["spec"]

    jobs = of_kind(render(spec(experiment=STABILITY), {"features": {"indexedJobs": False}}).objects, "Job")
    assert [env_of(j["spec"]["template"]["spec"])[E.FTBENCH_TRIAL_INDEX] for j in jobs] == list("01234")


@pytest.mark.parametrize(
    ("kw", "profile", "message"),
    [
        ({"numberGpus": 16, "numberNodes": 2, "run": {"runtime": "Job"}}, {}, "numberNodes is 2"),
        ({"run": {"runtime": "IndexedJob"}}, {"features": {"indexedJobs": False}}, "1.24"),
        ({"experiment": STABILITY, "run": {"runtime": "PyTorchJob"}}, {}, "sequential trials"),
    ],
)
def test_impossible_runtimes_are_errors(kw: dict, profile: dict, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(spec(**kw), profile)


@pytest.mark.parametrize(
    ("kw", "profile", "expected"),
    [
        ({}, {}, "flash_attention_2"),  # auto on GPUs whose images carry flash-attn (seed 001)
        ({}, {"flashAttention": False}, "sdpa"),
        ({"numberGpus": 0, "gpuModel": None, "batchSize": 2}, {}, "sdpa"),  # auto on CPU
        ({"attentionImplementation": "eager"}, {}, "eager"),
        ({"attentionImplementation": "sdpa"}, {}, "sdpa"),
    ],
)
def test_attention_implementation_in_the_plan(kw: dict, profile: dict, expected: str) -> None:
    assert render(spec(**kw), profile).plan.training.attn_implementation.value == expected


def test_flash_attention_on_images_without_it_is_refused() -> None:
    with pytest.raises(PlanError, match=r"flashAttention false"):
        render(spec(attentionImplementation="flash_attention_2"), {"flashAttention": False})


# ---- pods ----


def test_resources_cpu_memory_gpu() -> None:
    pod = pod_specs(render(spec(numberGpus=4, batchSize=4, run={"memory": "100Gi"})).objects)[0]
    res = pod["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "8", "memory": "100Gi", "nvidia.com/gpu": "4"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": A100}
    cpu_pod = pod_specs(render(spec(numberGpus=0, gpuModel="", batchSize=2)).objects)[0]
    assert cpu_pod["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "64Gi"}
    assert "nodeSelector" not in cpu_pod


def test_profile_scheduling_and_images() -> None:
    profile = {
        "gpuResource": "amd.com/gpu",
        "gpuNodeLabel": "gpu.example/model",
        "nodeSelector": {"pool": "train"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "images": {"repository": "registry.local/trainer", "pullSecrets": ["regcred"]},
    }
    rendered = render(spec(fmsHfTuningVersion="2.8.2", run={"priorityClassName": "high"}), profile)
    pod = pod_specs(rendered.objects)[0]
    assert pod["nodeSelector"] == {"pool": "train", "gpu.example/model": A100}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["priorityClassName"] == "high"
    container = pod["containers"][0]
    assert container["image"] == "registry.local/trainer:fms-hf-tuning-2.8.2"
    assert env_of(pod)[E.FTBENCH_IMAGE] == container["image"]
    assert container["resources"]["limits"]["amd.com/gpu"] == "8"


def test_volumes_plan_mount_and_termination_message() -> None:
    rendered = render(spec(), namespace="ns")
    (cm,) = of_kind(rendered.objects, "ConfigMap")
    assert LaunchPlan.from_json(cm["data"][PLAN_FILENAME]) == rendered.plan
    pod = pod_specs(rendered.objects)[0]
    container = pod["containers"][0]
    assert container["command"] == ["ftbench-trainer", "--plan", f"{PLAN_MOUNT_DIR}/{PLAN_FILENAME}"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[PLAN_MOUNT_DIR]]["configMap"]["name"] == cm["metadata"]["name"]
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
    assert volumes[mounts["/hf-models-pvc"]]["persistentVolumeClaim"]["claimName"] == "hf-models-pvc"
    assert env_of(pod)[E.HF_HOME] == rendered.plan.hf_home
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["terminationMessagePath"] == rendered.plan.output.termination_message_path
    assert all(o["metadata"]["namespace"] == "ns" for o in rendered.objects)


def test_security_restricted_without_roce() -> None:
    pod = pod_specs(render(spec()).objects)[0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = pod["containers"][0]["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_roce_multi_node() -> None:
    s = spec(numberGpus=16, numberNodes=2, enableRoce=True, run={"ncclDebug": True})
    rendered = render(s, ROCE_PROFILE)
    for pod in pod_specs(rendered.objects):
        container = pod["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/roce_gdr"] == "2"
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert pod["securityContext"]["runAsUser"] == 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["serviceAccountName"] == "roce"
        env = env_of(pod)
        assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3" and env[E.NCCL_IB_DISABLE] == "0"
        assert env[E.NCCL_DEBUG] == "INFO" and env[E.NCCL_DEBUG_SUBSYS] == "INIT,BOOTSTRAP,ENV"
        assert {"mountPath": "/var/run/nvidia-topologyd", "name": "nccl-topology", "readOnly": True} in container[
            "volumeMounts"
        ]
    pytorchjob = of_kind(rendered.objects, "PyTorchJob")[0]
    template = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "multi-nic-network"


def test_roce_ignored_on_one_node() -> None:
    rendered = render(spec(enableRoce=True), ROCE_PROFILE)
    pod = pod_specs(rendered.objects)[0]
    assert "nvidia.com/roce_gdr" not in pod["containers"][0]["resources"]["limits"]
    assert not any(k.startswith("NCCL_") for k in env_of(pod))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert any("RoCE" in n for n in rendered.plan.notes)


def test_kueue_queue_label_and_suspend() -> None:
    rendered = render(spec(run={"queueName": "team-a"}))
    (job,) = of_kind(rendered.objects, "Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and job["spec"]["suspend"] is True
    (cm,) = of_kind(rendered.objects, "ConfigMap")
    assert "kueue.x-k8s.io/queue-name" not in cm["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]
    (plain,) = of_kind(render(spec()).objects, "Job")
    assert "suspend" not in plain["spec"]


# ---- names and labels ----


def test_names_fit_and_are_stable() -> None:
    long = "x" * 40 + "." + "y" * 200
    s = spec(numberGpus=16, numberNodes=2)
    profile = ClusterProfile(features=Features(training_operator=True))
    rendered = render_experiment(s, CATALOG, profile, name=long, attempt=12)
    again = render_experiment(s, CATALOG, profile, name=long, attempt=12)
    assert rendered.objects == again.objects
    assert experiment_names(s, CATALOG, profile, name=long, attempt=12) == rendered.names
    assert len(f"{rendered.names.base}-worker-1023") <= DNS_LABEL_MAX
    for obj in rendered.objects:
        assert all(len(v) <= DNS_LABEL_MAX for v in obj["metadata"]["labels"].values())
        assert len(obj["metadata"]["name"]) <= DNS_LABEL_MAX
        if obj["kind"] not in ACCESS_KINDS:
            assert obj["metadata"]["annotations"]["ftbench.io/experiment-name"] == long
    other = render_experiment(s, CATALOG, profile, name=long[:-1] + "z", attempt=12)
    assert other.names.base != rendered.names.base
    assert attempt_selector(long, 12).endswith(",ftbench.io/attempt=12")


def test_child_names_per_runtime() -> None:
    indexed = child_names("9exp.v1", 3, Runtime.INDEXED_JOB, number_nodes=4, trials=1)
    assert indexed.base == "x-9exp-v1-cc055bb3-a3" and indexed.service == indexed.base
    assert indexed.master_host == "x-9exp-v1-cc055bb3-a3-0.x-9exp-v1-cc055bb3-a3"
    assert child_names("e", 0, Runtime.JOB, number_nodes=1, trials=5).workloads == tuple(f"e-a0-t{i}" for i in range(5))
    assert child_names("e", 0, Runtime.PYTORCH_JOB, number_nodes=2, trials=1).master_host == "e-a0-master-0"
    assert fit("a" * 10, 10) == "a" * 10 and len(fit("a" * 100, 20)) == 20


@pytest.mark.parametrize(("a", "b"), [("dup.x", "dup-x"), ("1abc", "x-1abc"), ("a..b", "a-b"), ("a.b", "a-b")])
def test_names_that_map_to_one_label_get_different_children(a: str, b: str) -> None:
    """Issue 12: two experiments in one namespace never share (or follow) each other's children."""
    for runtime in (Runtime.JOB, Runtime.INDEXED_JOB, Runtime.PYTORCH_JOB):
        first = child_names(a, 0, runtime, number_nodes=2, trials=1)
        second = child_names(b, 0, runtime, number_nodes=2, trials=1)
        assert not set(first.all) & set(second.all)
    assert child_names("dup-x", 0, Runtime.JOB, number_nodes=1, trials=1).base == "dup-x-a0"  # readable stays


# ---- the env contract the trainer reads ----


def test_node_placement_per_runtime() -> None:
    by_name = {c.name: c.render().plan for c in CASES}
    indexed = by_name["full-fsdp-2node-indexedjob"]
    got = E.node_placement(indexed, {E.JOB_COMPLETION_INDEX: "1"})
    assert got == E.NodePlacement(1, 2, indexed.rendezvous.master_host, indexed.rendezvous.port)
    pytorch = by_name["full-fsdp-2node-pytorchjob-roce"]
    env = {E.PYTORCHJOB_RANK: "1", E.PYTORCHJOB_MASTER_ADDR: "m-master-0", E.PYTORCHJOB_MASTER_PORT: "23456"}
    assert E.node_placement(pytorch, env) == E.NodePlacement(1, 2, "m-master-0", 23456)
    assert E.node_placement(by_name["lora-1gpu"], {}).master_addr == "127.0.0.1"
    with pytest.raises(E.RendezvousEnvError, match="RANK"):
        E.node_placement(pytorch, {})
    assert E.trial_index({E.FTBENCH_TRIAL_INDEX: "3"}) == 3 and E.trial_index({}) is None
    assert E.trial_failure_exit_zero({E.FTBENCH_TRIAL_FAILURE_EXIT_ZERO: "true"})


def test_features_for_kubernetes_version() -> None:
    assert Features.for_kubernetes(20) == Features(indexed_jobs=False, pod_failure_policy=False)
    assert Features.for_kubernetes(33, training_operator=True) == Features(
        training_operator=True, backoff_limit_per_index=True
    )


# ---- the trainer's identity (issue 12, least privilege) ----


def test_each_experiment_has_its_own_account_and_progress_grant() -> None:
    rendered = render(spec(), namespace="team")
    account, role, binding = (of_kind(rendered.objects, k)[0] for k in ACCESS_KINDS)
    assert account["metadata"]["name"] == "exp-trainer" and "ftbench.io/attempt" not in account["metadata"]["labels"]
    (rule,) = role["rules"]
    assert rule == {
        "apiGroups": ["ftbench.io"],
        "resources": ["finetuneexperiments/status"],
        "verbs": ["get", "patch"],
        "resourceNames": ["exp"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "exp-trainer", "namespace": "team"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (pod,) = pod_specs(rendered.objects)
    assert pod["serviceAccountName"] == "exp-trainer" and "automountServiceAccountToken" not in pod


def test_no_progress_reports_no_account_and_no_token() -> None:
    rendered = render(spec(), {"reportProgress": False})
    assert not [o for o in rendered.objects if o["kind"] in ACCESS_KINDS]
    (pod,) = pod_specs(rendered.objects)
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod


def test_a_profile_account_is_bound_but_not_created() -> None:
    rendered = render(spec(), {"serviceAccount": "shared"})
    assert [o["kind"] for o in rendered.objects if o["kind"] in ACCESS_KINDS] == ["Role", "RoleBinding"]
    assert of_kind(rendered.objects, "RoleBinding")[0]["subjects"][0]["name"] == "shared"
    assert pod_specs(rendered.objects)[0]["serviceAccountName"] == "shared"


def test_pytorchjob_workers_mount_no_token() -> None:
    rendered = render(spec(numberGpus=16, numberNodes=2), {"features": {"trainingOperator": True}})
    replicas = of_kind(rendered.objects, "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]
    assert "automountServiceAccountToken" not in replicas["Master"]["template"]["spec"]
    assert replicas["Worker"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_roce_non_root_switch() -> None:
    s = spec(numberGpus=16, numberNodes=2, enableRoce=True)
    profile = {**ROCE_PROFILE, "roce": {**ROCE_PROFILE["roce"], "runAsRoot": False}}
    for pod in pod_specs(render(s, profile).objects):
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
        assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
