"""Issue 12 regressions on the real control plane and operator: what a user writes cannot change
what is measured, reach a flag, take over another experiment's children, or leave a run hanging.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from operator_testkit import SELECTOR, TEST_PROFILE, Kubelet, failed_result, lora_spec, success_result, wait_for

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench.contracts.plan import PLAN_FILENAME
from ftbench_devcluster import ControlPlane
from ftbench_devcluster.crds import install_crd

pytestmark = pytest.mark.k8s


def plan_of(kube_api: Any, namespace: str, config_map: str) -> dict[str, Any]:
    data = CoreV1Api(kube_api).read_namespaced_config_map(config_map, namespace).data
    return json.loads(data[PLAN_FILENAME])


def patch_experiment(kube_api: Any, namespace: str, name: str, body: dict[str, Any]) -> None:
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def test_accepted_spec_annotation_cannot_override_what_runs(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 1: a user-set `ftbench.io/accepted-spec` annotation (at create, or edited before a retry)
    is ignored; the spec shown is the spec run, recorded in status where only the operator writes."""
    forged = json.dumps({"generation": 1, "spec": lora_spec(batchSize=64, maxSteps=99999)})
    annotations = {"ftbench.io/accepted-spec": forged}
    name = create_experiment(lora_spec(maxSteps=5), annotations=annotations)["metadata"]["name"]
    pending = kubelet.wait_phase(name, "Pending")
    assert pending["status"]["acceptedSpec"]["batchSize"] == 4
    plan = plan_of(kube_api, namespace, f"{name}-a0-plan")
    assert plan["topology"]["batchSize"] == 4 and plan["training"]["maxSteps"] == 5

    kubelet.finish(kubelet.wait_pods(1)[0], failed_result())
    kubelet.wait_phase(name, "Failed")
    patch_experiment(
        kube_api, namespace, name, {"metadata": {"annotations": {**annotations, "ftbench.io/retry": "now"}}}
    )
    wait_for(lambda: kubelet.experiment(name)["status"].get("attempt") == 1, what="attempt 1")
    plan = wait_for(lambda: plan_of(kube_api, namespace, f"{name}-a1-plan"), what="attempt 1 plan")
    assert plan["topology"]["batchSize"] == 4 and plan["training"]["maxSteps"] == 5
    # The operator writes the plan ConfigMap first and then the Job: wait for the Job, not just its plan.
    assert wait_for(lambda: BatchV1Api(kube_api).read_namespaced_job(f"{name}-a1", namespace), what="attempt 1 job")


def test_names_that_map_to_one_label_run_apart(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 3: `dup.x` and `dup-x` (and `1abc`, `x-1abc`) get their own children and results."""
    names = ["dup.x", "dup-x", "1abc", "x-1abc"]
    for i, name in enumerate(names):
        create_experiment(lora_spec(batchSize=4 * (i + 1)), name=name)
    jobs = {name: kubelet.wait_phase(name, "Pending")["status"]["job"]["name"] for name in names}
    assert len(set(jobs.values())) == len(names), jobs
    for i, name in enumerate(names):
        pod = kubelet.wait_pods(1, f"job-name={jobs[name]}")[0]
        kubelet.finish(pod, success_result(tokens_per_second=100.0 + i))
    for i, name in enumerate(names):
        done = kubelet.wait_phase(name, "Succeeded")
        assert done["status"]["results"]["trainTokensPerSecond"] == 100.0 + i
        assert done["status"]["acceptedSpec"]["batchSize"] == 4 * (i + 1)


def test_a_pre_created_child_is_never_adopted(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 3: an object with a child's name that this experiment does not own is not taken as
    "already created": the experiment fails with the reason, and what it did create is removed."""
    batch = BatchV1Api(kube_api)
    name = "taken"
    squatter = {
        "metadata": {"name": f"{name}-a0", "labels": {"app.kubernetes.io/managed-by": "ftbench"}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]},
            },
            "backoffLimit": 0,
        },
    }
    batch.create_namespaced_job(namespace, squatter)
    create_experiment(lora_spec(), name=name)
    failed = kubelet.wait_phase(name, "Failed")
    assert {c["type"]: c for c in failed["status"]["conditions"]}["Succeeded"]["reason"] == "ChildConflict"
    assert f"Job named {name}-a0 already exists" in failed["status"]["message"], failed["status"]
    assert "job" not in failed["status"]
    wait_for(lambda: not CoreV1Api(kube_api).list_namespaced_config_map(namespace, label_selector=SELECTOR).items,
             what="plan ConfigMap removed")  # fmt: skip
    assert batch.read_namespaced_job(f"{name}-a0", namespace).metadata.owner_references is None


def test_a_forged_status_job_fails_the_run_once(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 7: a status.job of a kind ftbench never creates fails the run with the reason
    instead of crashing every sync."""
    name = create_experiment(lora_spec())["metadata"]["name"]
    pod = kubelet.wait_pods(1)[0]
    kubelet.run(pod)
    kubelet.wait_phase(name, "Running")
    custom, core = CustomObjectsApi(kube_api), CoreV1Api(kube_api)
    forged = {"apiVersion": "v1", "kind": "Secret", "name": "x"}

    def forge_and_look() -> dict | None:
        """Forge (again, if a status write from before it landed put the real Job back) and touch
        the pod, which makes the operator look again; done once the run is Failed."""
        fte = kubelet.experiment(name)
        if fte["status"].get("phase") == "Failed":
            return fte
        if fte["status"].get("job") != forged:
            custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": {"job": forged}}
            )
        core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {"poke": uuid.uuid4().hex}}}
        )
        return None

    failed = wait_for(forge_and_look, interval=1.0, what=f"{name} Failed on its forged status.job")
    assert "not a workload ftbench creates" in failed["status"]["message"]
    assert "Traceback" not in operator.log()[-20000:]


def test_pytorchjob_without_its_crd_is_invalid_and_leaves_nothing(
    own_cluster: ControlPlane, tmp_path: Path, operator_process: Any
) -> None:
    """Item 8: runtime PyTorchJob on a cluster without the training operator is Invalid with the
    reason (not Failed with a raw 404), and the plan ConfigMap created before it is removed. A
    control plane of its own: other tests install the PyTorchJob CRD into the session's."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    install_crd(api, crd())
    core.create_namespace({"metadata": {"name": "bench"}})
    wait_for(lambda: core.read_namespaced_service_account("default", "bench").secrets, 30, what="SA token")
    operator = operator_process(own_cluster.kubeconfig, tmp_path, TEST_PROFILE).start()
    try:
        spec = lora_spec(numberGpus=2, batchSize=4, numberNodes=2, run={"runtime": "PyTorchJob"})
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}, "spec": spec}
        custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, body)
        invalid = Kubelet(api, "bench").wait_phase("exp", "Invalid")
        message = invalid["status"]["message"]
        assert "pytorchjobs.kubeflow.org" in message and "HTTP" not in message
        wait_for(lambda: not core.list_namespaced_config_map("bench", label_selector=SELECTOR).items,
                 what="plan ConfigMap removed")  # fmt: skip
    finally:
        operator.stop()


def test_missing_priority_class_fails_up_front(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 4: pods naming a PriorityClass that does not exist would never be created; the run
    fails at once with the reason (Failed, so ftbench.io/retry works once it exists)."""
    name = create_experiment(lora_spec(run={"priorityClassName": "no-such-class"}))["metadata"]["name"]
    failed = kubelet.wait_phase(name, "Failed")
    assert "PriorityClass no-such-class does not exist" in failed["status"]["message"]
    assert not BatchV1Api(kube_api).list_namespaced_job(namespace, label_selector=SELECTOR).items


def test_nothing_hangs_pending(own_cluster: ControlPlane, tmp_path: Path, operator_process: Any) -> None:
    """Item 4, with the profile's trainer ServiceAccount and a short pending deadline (a control
    plane of its own: the session operator has neither). A namespace without the account fails
    up front; an unschedulable pod is reported at once, then fails at the deadline with that reason."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    install_crd(api, crd())
    for ns in ("no-account", "has-account"):
        core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account("has-account", {"metadata": {"name": "trainer"}})
    wait_for(lambda: core.read_namespaced_service_account("trainer", "has-account").secrets, 30, what="SA token")
    profile = {**TEST_PROFILE, "serviceAccount": "trainer", "pendingDeadlineSeconds": 6}
    operator = operator_process(own_cluster.kubeconfig, tmp_path, profile).start()
    try:
        for ns in ("no-account", "has-account"):
            body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}, "spec": lora_spec()}
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        lacking = Kubelet(api, "no-account").wait_phase("exp", "Failed", timeout=60)
        assert "ServiceAccount trainer does not exist in namespace no-account" in lacking["status"]["message"]

        kubelet = Kubelet(api, "has-account")
        pod = kubelet.wait_pods(1, timeout=60)[0]
        scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}  # fmt: skip
        core.patch_namespaced_pod_status(pod.metadata.name, "has-account", {"status": {"conditions": [scheduled]}})
        reported = wait_for(
            lambda: (
                (s := kubelet.experiment("exp")["status"]).get("phase") == "Pending"
                and "Insufficient nvidia.com/gpu" in s.get("message", "")
                and s
            ),
            10,
            what="unschedulable reported while Pending",
        )
        assert {c["type"]: c for c in reported["conditions"]}["Running"]["reason"] == "Unschedulable"
        failed = kubelet.wait_phase("exp", "Failed", timeout=30)
        assert "PendingTimeout" in failed["status"]["message"] or "still pending" in failed["status"]["message"]
        assert "Insufficient nvidia.com/gpu" in failed["status"]["message"]
    finally:
        operator.stop()


def test_each_experiment_runs_as_its_own_trainer(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 6: the operator creates each experiment's ServiceAccount, Role (its own status only)
    and RoleBinding, owned by the experiment; its pods run as that account. The garbage collector
    removes them with the experiment (owner references; checked here by uid)."""
    from kubernetes.client import RbacAuthorizationV1Api

    core, rbac = CoreV1Api(kube_api), RbacAuthorizationV1Api(kube_api)
    uids = {}
    for name in ("own-a", "own-b"):
        uids[name] = create_experiment(lora_spec(), name=name)["metadata"]["uid"]
    for name, uid in uids.items():
        job = kubelet.wait_phase(name, "Pending")["status"]["job"]["name"]
        pod = kubelet.wait_pods(1, f"job-name={job}")[0]
        assert pod.spec.service_account_name == f"{name}-trainer"
        account = core.read_namespaced_service_account(f"{name}-trainer", namespace)
        role = rbac.read_namespaced_role(f"{name}-trainer", namespace)
        binding = rbac.read_namespaced_role_binding(f"{name}-trainer", namespace)
        for obj in (account, role, binding):
            assert [ref.uid for ref in obj.metadata.owner_references] == [uid], obj.metadata.name
        assert role.rules[0].resource_names == [name]
        assert [(s.kind, s.name) for s in binding.subjects] == [("ServiceAccount", f"{name}-trainer")]


def test_large_user_annotations_do_not_break_bookkeeping(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 7: ~200 KB of user annotations (the API server allows 256 KB in all). kopf's copy of
    the last handled configuration must not copy them, or its patch is refused and the create
    handler runs again on every event. The run reaches its outcome with one create invocation."""
    annotations = {f"example.com/blob-{i}": "x" * 50_000 for i in range(4)}
    name = create_experiment(lora_spec(), name="big-annotations", annotations=annotations)["metadata"]["name"]
    job = kubelet.wait_phase(name, "Pending")["status"]["job"]["name"]
    kubelet.finish(kubelet.wait_pods(1, f"job-name={job}")[0], success_result())
    done = kubelet.wait_phase(name, "Succeeded")
    stored = done["metadata"]["annotations"]
    last = stored["kopf.ftbench.io/last-handled-configuration"]
    assert len(last) < 4096 and "blob" not in last
    patch_experiment(kube_api, namespace, name, {"metadata": {"labels": {"touched": "yes"}}})  # one more event
    time.sleep(2)
    invoked = operator.log().count(f"[{namespace}/{name}] Handler 'create' is invoked")
    assert invoked == 1, f"create ran {invoked} times"


def test_no_pod_created_says_why_at_once(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 4: when the Job controller cannot create a pod (here a ResourceQuota of 0 pods), the
    experiment says so while Pending, in the API server's words from the FailedCreate Event."""
    core = CoreV1Api(kube_api)
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    wait_for(lambda: core.read_namespaced_resource_quota("no-pods", namespace).status.hard, 30, what="quota status")
    name = create_experiment(lora_spec(), name="over-quota")["metadata"]["name"]
    reported = wait_for(
        lambda: (
            (s := kubelet.experiment(name).get("status") or {}).get("phase") == "Pending"
            and "exceeded quota" in s.get("message", "")
            and s
        ),
        45,
        what="FailedCreate reported while Pending",
    )
    assert {c["type"]: c for c in reported["conditions"]}["Running"]["reason"] == "FailedCreate"
    assert f"Job {name}-a0 cannot create pods" in reported["message"]


def test_profile_comes_from_the_operator_namespace_only(
    own_cluster: ControlPlane, tmp_path: Path, operator_process: Any
) -> None:
    """Item 5: started outside a pod with no profile file, the operator reads the labelled
    `ftbench-profile` ConfigMap of FTBENCH_OPERATOR_PROFILE_NAMESPACE only; a tenant's
    ConfigMap of the same name and label (present at start, and changed later) sets nothing."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    install_crd(api, crd())

    def profile_map(namespace: str, repository: str) -> dict[str, Any]:
        profile = {**TEST_PROFILE, "images": {"repository": repository}}
        return {
            "metadata": {"name": "ftbench-profile", "namespace": namespace, "labels": {"ftbench.io/profile": "true"}},
            "data": {"profile.yaml": yaml.safe_dump(profile)},
        }

    for ns in ("ops", "tenant"):
        core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_config_map("ops", profile_map("ops", "registry.ops/trainer"))
    core.create_namespaced_config_map("tenant", profile_map("tenant", "evil.example/first"))
    env = {"FTBENCH_OPERATOR_PROFILE_NAMESPACE": "ops"}
    operator = operator_process(own_cluster.kubeconfig, tmp_path, env=env, profile_file=False).start()
    try:
        core.replace_namespaced_config_map("ftbench-profile", "tenant", profile_map("tenant", "evil.example/later"))
        time.sleep(2)  # the operator has seen the tenant's change, if it were to take it
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}, "spec": lora_spec()}
        custom.create_namespaced_custom_object(GROUP, VERSION, "tenant", PLURAL, body)
        job = Kubelet(api, "tenant").wait_phase("exp", "Pending", timeout=60)["status"]["job"]["name"]
        image = client.BatchV1Api(api).read_namespaced_job(job, "tenant").spec.template.spec.containers[0].image
        assert image.startswith("registry.ops/trainer:"), image
        assert "cluster profile loaded from configmap ops/ftbench-profile" in operator.log()
        assert "loaded from configmap tenant/" not in operator.log()
    finally:
        operator.stop()


def test_an_invalid_profile_stops_the_operator_at_start(
    control_plane: Any, experiment_crd: str, tmp_path: Path, operator_process: Any
) -> None:
    """Issue 44.2: a profile the API server or the kubelet would refuse the objects of (an empty GPU
    resource, a label value with a space, two volumes at one path) never starts the operator: one log
    line names each field, its value and what it must be, and the process exits (a non-ready pod)."""
    storage = {"models": {"claimName": "m", "mountPath": "/data"}, "data": {"claimName": "d", "mountPath": "/data"}}
    bad = {**TEST_PROFILE, "gpuResource": "", "podLabels": {"team": "my team!"}, "storage": storage}
    with pytest.raises(RuntimeError, match="operator exited") as caught:
        operator_process(control_plane.kubeconfig, tmp_path, bad).start()
    line = next(x for x in str(caught.value).splitlines() if "the operator does not start" in x)
    assert "gpuResource (value: '')" in line and "extended resource name" in line
    assert "podLabels.team (value: 'my team!')" in line and "label value" in line
    assert "both mounted at /data" in line
