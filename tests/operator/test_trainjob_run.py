"""A TrainJob run end to end: the operator detects Kubeflow Trainer v2, the test plays Kueue and the
Trainer controller (JobSet pods, TrainJob status), and the experiment reaches Succeeded.

On a control plane of its own: detection happens at operator start, after the upstream Trainer
CRDs and the torch-distributed ClusterTrainingRuntime are installed (the session's operator
started before them, and would also act on this experiment).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_testkit import Kubelet, lora_spec, success_result, wait_for

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench.render.trainjob import JOBSET_NAME_LABEL
from ftbench_devcluster import ControlPlane
from ftbench_devcluster.crds import install_crd, without_empty_string_defaults
from tests.unit.render_cases import trainer_v2_dir

pytestmark = pytest.mark.k8s
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def own_cluster(control_plane_binaries: dict[str, Path]) -> Iterator[ControlPlane]:
    with ControlPlane(binaries=control_plane_binaries) as cp:
        yield cp


def install_trainer_v2(api: Any) -> None:
    """The upstream v2.3.0 CRDs (1.20 ignores their CEL rules and refuses their empty-string
    defaults, see `without_empty_string_defaults`), and the default torch-distributed runtime."""
    from kubernetes import client

    fixtures = trainer_v2_dir()
    if not fixtures.exists():
        pytest.skip(f"Kubeflow Trainer fixtures not found at {fixtures} (set FTBENCH_SHARED_DIR)")
    for name in ("trainjobs", "clustertrainingruntimes"):
        crd_doc = yaml.safe_load((fixtures / f"trainer.kubeflow.org_{name}.yaml").read_text())
        install_crd(api, without_empty_string_defaults(crd_doc))
    runtime = yaml.safe_load((fixtures / "torch_distributed.yaml").read_text())
    client.CustomObjectsApi(api).create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)


def play_trainer_controller(api: Any, namespace: str, job: dict[str, Any]) -> list[Any]:
    """What Trainer + JobSet do with an admitted TrainJob: one Indexed Job of numNodes pods, the
    runtime patch's labels and annotations on them, the completion index as the node rank."""
    from kubernetes.client import CoreV1Api

    name = job["metadata"]["name"]
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    template = rjob["template"]["spec"]["template"]
    trainer = job["spec"]["trainer"]
    owner = {
        "apiVersion": f"{TRAINER[0]}/{TRAINER[1]}",
        "kind": "TrainJob",
        "name": name,
        "uid": job["metadata"]["uid"],
    }
    pods = []
    for index in range(trainer["numNodes"]):
        container = {
            "name": "node",
            "image": trainer["image"],
            "command": trainer["command"],
            "env": trainer["env"],
            "resources": trainer["resourcesPerNode"],
            **copy.deepcopy(template["spec"]["containers"][0]),
        }
        spec = {**copy.deepcopy(template["spec"]), "containers": [container], "restartPolicy": "OnFailure"}
        body = {
            "metadata": {
                "name": f"{name}-{rjob['name']}-0-{index}-x{index}",
                "labels": {**template["metadata"]["labels"], JOBSET_NAME_LABEL: name},
                "annotations": {**template["metadata"].get("annotations", {}), JOB_COMPLETION_INDEX: str(index)},
                "ownerReferences": [owner],
            },
            "spec": spec,
        }
        pods.append(CoreV1Api(api).create_namespaced_pod(namespace, body))
    return pods


def test_trainjob_run_detected_queued_and_followed(
    own_cluster: ControlPlane, tmp_path: Path, operator_process: Any
) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    install_crd(api, crd())
    install_trainer_v2(api)
    namespace = "bench"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.read_namespaced_service_account("default", namespace).secrets, what="default SA token")
    # No features in the profile: the operator takes them from the server (1.20, Trainer v2 present).
    operator = operator_process(own_cluster.kubeconfig, tmp_path, profile={}).start()
    try:
        spec = lora_spec(numberNodes=2, numberGpus=16, batchSize=16, run={"queueName": "gpu-queue"})
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}, "spec": spec}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        kubelet = Kubelet(api, namespace)

        def queued() -> dict[str, Any] | None:
            fte = kubelet.experiment("exp")
            conds = {c["type"]: c for c in fte.get("status", {}).get("conditions", [])}
            return fte if conds.get("Queued", {}).get("status") == "True" else None

        fte = wait_for(queued, timeout=60, what="experiment queued")
        status = fte["status"]
        assert status["phase"] == "Pending" and status["job"]["kind"] == "TrainJob"
        assert status["runtime"]["name"] == "TrainJob"
        assert "Trainer v2" in status["runtime"]["reason"] and "torch-distributed" in status["runtime"]["reason"]
        job = custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", "exp-a0")
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue" and job["spec"]["suspend"]
        assert job["metadata"]["ownerReferences"][0]["name"] == "exp"
        assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
        assert job["spec"]["trainer"]["numNodes"] == 2  # the 1.20 server kept what it knows of the schema

        # Kueue admits it; Trainer creates the JobSet's pods.
        custom.patch_namespaced_custom_object(*TRAINER, namespace, "trainjobs", "exp-a0", {"spec": {"suspend": False}})
        rank0, rank1 = play_trainer_controller(api, namespace, job)
        kubelet.run(rank0)
        kubelet.run(rank1)
        running = kubelet.wait_phase("exp", "Running", timeout=60)
        conds = {c["type"]: c for c in running["status"]["conditions"]}
        assert (conds["Queued"]["status"], conds["Queued"]["reason"]) == ("False", "Admitted")
        kubelet.finish(rank1, success_result())  # only rank 0's termination message is the result
        kubelet.finish(rank0, success_result(tokens_per_second=4321.0))
        custom.patch_namespaced_custom_object_status(
            *TRAINER,
            namespace,
            "trainjobs",
            "exp-a0",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Complete",
                            "status": "True",
                            "reason": "JobSetCompleted",
                            "message": "jobset completed",  # 1.20 merge patches turn "" into null
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                }
            },
        )
        done = kubelet.wait_phase("exp", "Succeeded", timeout=60)
        assert done["status"]["results"]["trainTokensPerSecond"] == 4321.0
    finally:
        operator.stop()
