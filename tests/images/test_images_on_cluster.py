"""The images on the test control plane, as a cluster runs them: the chart's operator Deployment
from the operator image, and the experiments' pods from the trainer images, both run by the local
kubelets in image mode (each container in its image's root file system, as its user), on the nodes
kube-scheduler places them on."""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_kit import SCHEDULER, Cluster, poll, tiny_lora_spec

from ftbench.api.crd import crd
from ftbench.contracts.enums import Engine
from ftbench.contracts.images import OPERATOR_UID
from ftbench.images import plan
from ftbench_devcluster.crds import install_crd
from ftbench_devcluster.devup import seed_models
from tests.ship.chart import render

pytestmark = [pytest.mark.images, pytest.mark.k8s, pytest.mark.training]


@pytest.fixture(scope="module")
def cluster(
    images: list[plan.ImageBuild], control_plane: Any, kube_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The rig's scheduler and nodes, kubelets in image mode; no operator process: the operator comes as the
    chart's pod (which names the rig's scheduler, as its training pods do through the chart's clusterProfile)."""
    install_crd(kube_api, crd())
    cluster = Cluster(control_plane, kube_api, tmp_path_factory.mktemp("images"), images=True)
    if seed_models(cluster.pvc_dir) is None:
        pytest.skip("the trainer extra (ftbench_trainer, torch) is not installed: no tiny model to seed")
    try:
        cluster.start(operator=False)
        yield cluster
    finally:
        cluster.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return answer.read().decode(errors="replace")


@pytest.fixture(scope="module")
def operator(cluster: Cluster, kube_api: Any) -> Iterator[tuple[str, dict[str, int]]]:
    """The chart, rendered for one namespace it watches, installed; its operator pod running.

    The chart's health and metrics ports are chosen free: pods share the host's network here.
    """
    from kubernetes import client, utils

    namespace = f"t-img-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": namespace, "labels": {"ftbench.dev/test": "true"}}})
    poll(lambda: core.read_namespaced_service_account("default", namespace).secrets, 30, "the default token")
    cluster.serve(namespace)
    ports = {"health": free_port(), "metrics": free_port()}
    values = {
        "schedulerName": SCHEDULER,
        "clusterProfile": {"schedulerName": SCHEDULER},
        "watch": {"namespaces": [namespace]},
        "operator": {"healthPort": ports["health"]},
        "metrics": {"port": ports["metrics"]},
    }
    objects = render(values, namespace=namespace, release=f"r{uuid.uuid4().hex[:8]}")
    try:
        for obj in objects:
            utils.create_from_dict(kube_api, obj)
        poll(lambda: _running_operator(cluster, namespace), 120, "the operator pod Running")
        poll(lambda: _answers(f"http://127.0.0.1:{ports['health']}/healthz"), 60, "the operator's liveness endpoint")
        yield namespace, ports
    finally:
        rbac = client.RbacAuthorizationV1Api(kube_api)
        for obj in objects:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])
        core.delete_namespace(namespace)


def _running_operator(cluster: Cluster, namespace: str) -> bool:
    pods = cluster.pods(namespace, selector="app.kubernetes.io/component=operator")
    return any(p.status.phase == "Running" for p in pods)


def _answers(url: str) -> bool:
    try:
        http_get(url)
    except OSError:
        return False
    return True


def test_operator_pod_runs_the_image_as_its_user_and_answers(
    cluster: Cluster, operator: tuple[str, dict[str, int]]
) -> None:
    namespace, ports = operator
    pod = next(p for p in cluster.pods(namespace, "app.kubernetes.io/component=operator"))
    assert pod.spec.containers[0].image == plan.operator_image()
    assert pod.status.phase == "Running"
    [spec] = cluster.container_specs(namespace, pod.metadata.name)
    assert spec["user"]["uid"] == OPERATOR_UID and spec["rootfs"], spec
    assert "ftbench" in http_get(f"http://127.0.0.1:{ports['metrics']}/metrics")


def succeeded(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Apply ``spec``, follow it to its end, and insist on Succeeded (the pods' logs if not)."""
    cluster.apply(namespace, name, spec)
    final = cluster.follow(namespace, name, timeout=400).final
    if final["phase"] != "Succeeded":
        logs = "\n".join(cluster.pod_log(namespace, p.metadata.name) for p in cluster.pods(namespace))
        pytest.fail(f"{name}: {final['phase']}: {final.get('message')}\n{logs[-6000:]}")
    return final


def test_trl_image_trains_an_experiment_to_succeeded(cluster: Cluster, operator: tuple[str, dict[str, int]]) -> None:
    namespace, _ = operator
    final = succeeded(cluster, namespace, "trl", tiny_lora_spec())
    env = final["environment"]
    # The result went through the termination-message file the kubelet mounted at /dev/termination-log
    # inside the pod's root (not the host's /dev, where trainers run outside containers write theirs).
    [log] = cluster.kubelet_dir.glob(f"*/pods/{namespace}_trl-a0-*/containers/trainer/termination-log")
    assert '"outcome":"Succeeded"' in log.read_text()
    assert not Path("/dev/termination-log").exists(), "image mode made a mount point in the host's /dev"
    assert env["image"] == plan.trainer_image(Engine.TRL) and env["engine"] == "trl", env


@pytest.mark.parametrize("version", plan.ci_releases())
def test_fms_image_trains_an_experiment_to_succeeded(
    cluster: Cluster, operator: tuple[str, dict[str, int]], version: str
) -> None:
    namespace, _ = operator
    name = "fms-" + version.replace(".", "-")
    final = succeeded(cluster, namespace, name, tiny_lora_spec(engine="fms-hf-tuning", fmsHfTuningVersion=version))
    env = final["environment"]
    assert env["image"] == plan.trainer_image(Engine.FMS_HF_TUNING, version), env
    assert (env["engine"], env["engineVersion"]) == ("fms-hf-tuning", version), env
