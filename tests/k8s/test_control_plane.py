"""The test control plane is a real one: API server, RBAC bootstrap, Job controller, clean shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ftbench_devcluster import ControlPlane, ControlPlaneError

pytestmark = pytest.mark.k8s


def _poll(what: str, fn: Any, timeout: float = 30.0, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; stop() reaps its children, so this should not happen.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_apiserver_ready_and_version(control_plane: ControlPlane, kube_api: Any) -> None:
    from kubernetes.client import VersionApi

    assert control_plane.request("GET", "/readyz") == "ok"
    version = VersionApi(kube_api).get_code()
    binary = subprocess.run(
        [str(control_plane.binaries["kube-apiserver"]), "--version"], capture_output=True, text=True
    ).stdout
    assert version.git_version in binary
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        assert (version.major, version.minor) == ("1", "20"), version.git_version
    assert control_plane.kubeconfig.is_file()
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_namespace_can_be_created(kube_api: Any) -> None:
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(kube_api)
    name = f"t-create-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        assert core.read_namespace(name).status.phase == "Active"
    finally:
        core.delete_namespace(name)


def test_job_controller_creates_pod_and_completes_job(kube_api: Any, namespace: str) -> None:
    from kubernetes.client import BatchV1Api, CoreV1Api

    core, batch = CoreV1Api(kube_api), BatchV1Api(kube_api)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "hello"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
                }
            },
        },
    }
    batch.create_namespaced_job(namespace, job)

    pods = _poll(
        "the Job controller to create a Pod",
        lambda: core.list_namespaced_pod(namespace, label_selector="job-name=hello").items,
    )
    assert len(pods) == 1
    pod = pods[0]
    assert pod.status.phase == "Pending"  # no scheduler, no kubelet

    # Play the kubelet: the container ran and exited 0.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "message": "all good",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            ],
        }
    }
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, status)
    stored = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert stored.status.container_statuses[0].state.terminated.message == "all good"

    def complete() -> bool:
        conditions = batch.read_namespaced_job_status("hello", namespace).status.conditions or []
        return any(c.type == "Complete" and c.status == "True" for c in conditions)

    _poll("the Job to become Complete", complete)
    assert batch.read_namespaced_job_status("hello", namespace).status.succeeded == 1


def test_custom_resources_work(kube_api: Any, namespace: str) -> None:
    """Creating a custom resource crashed the unpatched build (vendored reflect2 v1.0.1, Go >= 1.18)."""
    from kubernetes.client import ApiextensionsV1Api, CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    ext, custom = ApiextensionsV1Api(kube_api), CustomObjectsApi(kube_api)
    group = f"g{uuid.uuid4().hex[:8]}.ftbench.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:

        def established() -> bool:
            conditions = ext.read_custom_resource_definition(f"widgets.{group}").status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        _poll("the CRD to be established", established)

        def create() -> bool:
            try:
                custom.create_namespaced_custom_object(
                    group, "v1", namespace, "widgets",
                    {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}},
                )  # fmt: skip
            except ApiException as exc:  # 404 until discovery/storage for the new type is wired up
                if exc.status == 404:
                    return False
                raise
            return True

        _poll("the first custom resource to be created", create)
        custom.patch_namespaced_custom_object_status(
            group, "v1", namespace, "widgets", "w", {"status": {"phase": "Ready"}}
        )
        obj = custom.get_namespaced_custom_object(group, "v1", namespace, "widgets", "w")
        assert obj["spec"] == {"size": 3}
        assert obj["status"] == {"phase": "Ready"}
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_stop_leaves_no_processes(control_plane_binaries: dict[str, Path], tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp", binaries=control_plane_binaries)
    try:
        cp.start()
        pids = cp.pids
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert all(_alive(pid) for pid in pids.values())
    finally:
        cp.stop()
    assert not [name for name, pid in pids.items() if _alive(pid)]
    for pid in pids.values():  # each process was its own group leader; nothing left in the groups
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert cp.processes == {}
    cp.stop()  # idempotent


def test_failed_start_reports_log_and_cleans_up(control_plane_binaries: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'boom: cannot serve' >&2\nexit 3\n")
    broken.chmod(0o755)
    cp = ControlPlane(tmp_path / "cp", binaries={**control_plane_binaries, "kube-apiserver": broken})
    with pytest.raises(ControlPlaneError, match="boom: cannot serve") as info:
        cp.start()
    assert "exited with code 3" in str(info.value)
    assert cp.processes == {}  # etcd, which did start, was stopped again
    assert (cp.logs_dir / "kube-apiserver.log").is_file()  # logs are kept after a failed start
    cp.stop()


def test_servers_die_with_their_parent(control_plane_binaries: dict[str, Path], tmp_path: Path) -> None:
    """A SIGKILLed test run (no finally, no atexit) must not leak servers: PR_SET_PDEATHSIG."""
    script = (
        "import json, sys, time\n"
        "from ftbench_devcluster import ControlPlane\n"
        "cp = ControlPlane(sys.argv[1], binaries=json.loads(sys.argv[2])).start()\n"
        "print(json.dumps(cp.pids), flush=True)\n"
        "time.sleep(600)\n"
    )
    binaries = json.dumps({k: str(v) for k, v in control_plane_binaries.items()})
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "cp"), binaries], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        pids: dict[str, int] = json.loads(proc.stdout.readline() or "{}")
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    finally:
        proc.kill()
        proc.wait()
    _poll("the servers to die with their parent", lambda: not any(_alive(p) for p in pids.values()), 10)
