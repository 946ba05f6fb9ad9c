"""The local kubelet against the real control plane: pods really run, status is real.

One kubelet process per module (``python -m ftbench_devcluster.kubelet``, as ``ftbench dev up``
starts it), serving only the namespaces these tests label, so pods of other test modules on the
shared control plane stay Pending as they expect.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ftbench.contracts.kube import Obj
from ftbench_devcluster.kubelet import kill_all_pods

pytestmark = pytest.mark.k8s

NODE = f"kubelet-test-{uuid.uuid4().hex[:6]}"
SERVE_LABEL = ("ftbench.dev/local-kubelet", NODE)


class Kubelet:
    """The kubelet process of this module, restartable."""

    def __init__(self, kubeconfig: Path, state_dir: Path) -> None:
        self.kubeconfig, self.state_dir = kubeconfig, state_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            sys.executable, "-m", "ftbench_devcluster.kubelet", "--kubeconfig", str(self.kubeconfig),
            "--node-name", NODE, "--state-dir", str(self.state_dir), "--label", "nvidia.com/gpu.product=Test-GPU",
            "--gpus", "2", "--namespace-label", "=".join(SERVE_LABEL), "--interval", "0.2",
        ]  # fmt: skip
        log = (self.state_dir / "kubelet.log").open("ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)
        self.proc = None


@pytest.fixture(scope="module")
def kubelet(control_plane, tmp_path_factory) -> Iterator[Kubelet]:
    state = tmp_path_factory.mktemp("kubelet")
    k = Kubelet(Path(control_plane.kubeconfig), state)
    k.start()
    try:
        yield k
    finally:
        k.stop()
        kill_all_pods(state)
        control_plane.request("DELETE", f"/api/v1/nodes/{NODE}")
        print((state / "kubelet.log").read_text()[-3000:])


@pytest.fixture
def ns(namespace: str, control_plane, kubelet: Kubelet) -> str:
    """The test namespace, labelled so that this module's kubelet serves it."""
    body = {"metadata": {"labels": {SERVE_LABEL[0]: SERVE_LABEL[1]}}}
    _patch(control_plane, f"/api/v1/namespaces/{namespace}", body)
    return namespace


def _patch(cp, path: str, body: Obj) -> None:
    import ssl
    import urllib.request

    req = urllib.request.Request(cp.server + path, data=json.dumps(body).encode(), method="PATCH")
    req.add_header("Authorization", f"Bearer {cp.token}")
    req.add_header("Content-Type", "application/merge-patch+json")
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(cp.ca_file)), timeout=10):
        pass


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def pod(name: str, script: str, *, shell: str = "sh", **spec: Any) -> Obj:
    container = {
        "name": "main",
        "image": "ignored:latest",
        "command": [shell, "-c", script],
        **spec.pop("container", {}),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **spec.pop("metadata", {})},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}  # fmt: skip


def create(cp, ns: str, obj: Obj) -> Obj:
    return cp.request("POST", f"/api/v1/namespaces/{ns}/pods", obj)


def get_pod(cp, ns: str, name: str) -> Obj:
    return cp.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")


def wait_phase(cp, ns: str, name: str, phases: tuple[str, ...] = ("Succeeded", "Failed"), timeout: float = 30.0) -> Obj:
    def check() -> Obj | None:
        p = get_pod(cp, ns, name)
        return p if p.get("status", {}).get("phase") in phases else None

    return wait_for(check, timeout, f"pod {name} in {phases}")


def terminated(p: Obj) -> Obj:
    return p["status"]["containerStatuses"][0]["state"]["terminated"]


def test_pod_runs_with_env_volumes_and_termination_message(control_plane, ns: str, kubelet: Kubelet) -> None:
    cp = control_plane
    cp.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "plan"}, "data": {"plan.json": '{"a": 1}', "k": "from-cm"}},
    )
    pvc = kubelet.state_dir / "pvc" / "models"
    pvc.mkdir(parents=True, exist_ok=True)
    (pvc / "weights.txt").write_text("tiny")
    script = textwrap.dedent("""\
        set -e
        test "$POD_NAME" = env-pod && test "$POD_NS" = "$EXPECT_NS" && test "$INDEX" = 3 && test "$FROM_CM" = from-cm
        case "$POD_IP" in 127.*) ;; *) exit 11;; esac
        test "$(cat /etc/ftbench/plan.json)" = '{"a": 1}'
        test "$(cat /models/weights.txt)" = tiny
        echo written > /models/out.txt
        df /dev/shm | grep -q tmpfs
        echo scratch > /scratch/x && test "$(pwd)" = /scratch
        grep -q "$POD_IP" /etc/hosts
        test "$(hostname)" = env-pod
        printf 'result: %s' "$GREETING" > /dev/termination-log
        """)  # fmt: skip
    body = pod(
        "env-pod", script,
        metadata={"annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
        container={
            "workingDir": "/scratch",
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "plan", "key": "k"}}},
                {"name": "EXPECT_NS", "value": ns},
                {"name": "GREETING", "value": "hello $(POD_NAME)"},
            ],
            "volumeMounts": [
                {"name": "plan", "mountPath": "/etc/ftbench", "readOnly": True},
                {"name": "models", "mountPath": "/models"},
                {"name": "dshm", "mountPath": "/dev/shm"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        volumes=[
            {"name": "plan", "configMap": {"name": "plan"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )  # fmt: skip
    create(cp, ns, body)
    running = wait_phase(cp, ns, "env-pod", ("Running", "Succeeded", "Failed"))
    assert running["spec"]["nodeName"] == NODE
    done = wait_phase(cp, ns, "env-pod")
    state = terminated(done)
    assert done["status"]["phase"] == "Succeeded", (state, _logs(kubelet, "env-pod"))
    assert state["exitCode"] == 0 and state["reason"] == "Completed"
    assert state["message"] == "result: hello env-pod"
    assert done["status"]["podIP"].startswith("127.") and done["status"]["startTime"]
    assert (pvc / "out.txt").read_text() == "written\n"
    # The host's paths were never touched.
    assert not Path("/etc/ftbench").exists() and not Path("/models").exists() and not Path("/scratch").exists()
    assert not Path("/dev/termination-log").exists()


def _logs(kubelet: Kubelet, pod_name: str) -> str:
    return "\n".join(p.read_text() for p in kubelet.state_dir.glob(f"pods/*_{pod_name}_*/containers/*/log"))


def test_failing_command_reports_exit_code_and_log_fallback(control_plane, ns: str) -> None:
    body = pod("fails", "echo something broke; exit 3", container={"terminationMessagePolicy": "FallbackToLogsOnError"})
    create(control_plane, ns, body)
    done = wait_phase(control_plane, ns, "fails")
    state = terminated(done)
    assert done["status"]["phase"] == "Failed"
    assert state["exitCode"] == 3 and state["reason"] == "Error"
    assert "something broke" in state["message"]


def test_missing_command_fails_like_a_container_runtime(control_plane, ns: str) -> None:
    create(control_plane, ns, pod("nocmd", "", container={"command": ["no-such-binary-xyz"]}))
    state = terminated(wait_phase(control_plane, ns, "nocmd"))
    assert state["exitCode"] == 127


def test_unschedulable_pod_stays_pending(control_plane, ns: str) -> None:
    create(
        control_plane, ns, pod("too-many-gpus", "true", container={"resources": {"limits": {"nvidia.com/gpu": "3"}}})
    )
    create(control_plane, ns, pod("wrong-gpu", "true", nodeSelector={"nvidia.com/gpu.product": "Other"}))

    def unschedulable(name: str) -> Callable[[], bool]:
        def check() -> bool:
            conds = get_pod(control_plane, ns, name).get("status", {}).get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conds)

        return check

    wait_for(unschedulable("too-many-gpus"), 15, "Unschedulable")
    wait_for(unschedulable("wrong-gpu"), 15, "Unschedulable")
    assert not get_pod(control_plane, ns, "wrong-gpu")["spec"].get("nodeName")


def test_deleting_a_running_pod_kills_its_processes(control_plane, ns: str, kubelet: Kubelet) -> None:
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    create(control_plane, ns, pod("sleeper", f"sleep 600; echo {marker}"))
    wait_phase(control_plane, ns, "sleeper", ("Running",))
    wait_for(lambda: _pids(marker), 10, "the sleep process")
    control_plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/sleeper", {"gracePeriodSeconds": 30})

    def gone() -> bool:
        try:
            get_pod(control_plane, ns, "sleeper")
        except Exception:
            return True
        return False

    wait_for(gone, 20, "pod deletion to be confirmed")
    assert not _pids(marker)
    assert not list(kubelet.state_dir.glob("pods/*_sleeper_*"))


def _pids(marker: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    out.append(int(proc.name))
            except OSError:
                pass
    return out


SERVER = """
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], 29500)); s.listen(1)
conn, peer = s.accept()
conn.sendall(b"rank0 at " + os.environ["POD_IP"].encode())
open("/dev/termination-log", "w").write("served " + peer[0])
"""

CLIENT = """
import os, socket, time
for _ in range(100):
    try:
        c = socket.create_connection((os.environ["MASTER"], 29500), timeout=2); break
    except OSError:
        time.sleep(0.2)
msg = c.recv(100).decode()
open("/dev/termination-log", "w").write(msg + " from " + os.environ["POD_IP"])
"""


def test_two_pods_of_a_headless_service_reach_each_other_by_dns_name(control_plane, ns: str) -> None:
    """Rank 0 as the Indexed Job rendering names it: ``<job>-0.<service>`` (and the FQDN)."""
    svc = {
        "metadata": {"name": "train"},
        "spec": {"clusterIP": "None", "selector": {"job-name": "train"}, "ports": [{"port": 29500}]},
    }
    control_plane.request("POST", f"/api/v1/namespaces/{ns}/services", svc)
    ip_env = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    for index, script, master in ((0, SERVER, ""), (1, CLIENT, f"train-0.train.{ns}.svc.cluster.local")):
        body = pod(
            f"train-{index}-x", "",
            metadata={"labels": {"job-name": "train"}, "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            subdomain="train",
            container={"command": [sys.executable, "-c", script], "env": [ip_env, {"name": "MASTER", "value": master or "-"}]},
        )  # fmt: skip
        create(control_plane, ns, body)
    server, client = (terminated(wait_phase(control_plane, ns, f"train-{i}-x")) for i in (0, 1))
    server_ip = get_pod(control_plane, ns, "train-0-x")["status"]["podIP"]
    client_ip = get_pod(control_plane, ns, "train-1-x")["status"]["podIP"]
    assert server_ip != client_ip
    assert client["message"] == f"rank0 at {server_ip} from {client_ip}"
    # Pods share the host's network namespace: outgoing connections leave from 127.0.0.1.
    assert server["message"].startswith("served 127.")


def test_kubelet_restart_mid_run_neither_duplicates_nor_loses_the_pod(control_plane, ns: str, kubelet: Kubelet) -> None:
    script = "echo run >> /data/runs.txt; sleep 4; printf finished > /dev/termination-log"
    body = pod(
        "survivor", script,
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": f"restart-{ns}"}}],
    )  # fmt: skip
    create(control_plane, ns, body)
    wait_phase(control_plane, ns, "survivor", ("Running",))
    kubelet.stop(signal.SIGKILL)
    time.sleep(1)
    kubelet.start()
    done = wait_phase(control_plane, ns, "survivor", timeout=40)
    assert done["status"]["phase"] == "Succeeded"
    assert terminated(done)["message"] == "finished"
    assert (kubelet.state_dir / "pvc" / f"restart-{ns}" / "runs.txt").read_text() == "run\n"


def test_lost_process_after_restart_is_reported_as_kubelet_restarted(control_plane, ns: str, kubelet: Kubelet) -> None:
    marker = f"lost-{uuid.uuid4().hex[:8]}"
    create(control_plane, ns, pod("lost", f"sleep 600; echo {marker}"))
    wait_phase(control_plane, ns, "lost", ("Running",))
    kubelet.stop(signal.SIGKILL)
    # The container's processes die while no kubelet watches: its whole group first, so no process of
    # it outlives the others long enough to record an exit status, then any stragglers.
    pid_file = next(kubelet.state_dir.glob("pods/*_lost_*/containers/main/pid"))
    os.killpg(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)
    for pid in _pids(marker):
        with contextlib.suppress(ProcessLookupError):  # already gone with its group
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    kubelet.start()
    done = wait_phase(control_plane, ns, "lost", timeout=40)
    assert done["status"]["phase"] == "Failed"
    assert terminated(done)["reason"] == "KubeletRestarted"


def test_job_controller_completes_a_job_whose_pod_the_kubelet_ran(control_plane, ns: str) -> None:
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello"},
        "spec": {"backoffLimit": 0, "template": pod("x", "echo hi > /dev/termination-log")},
    }  # fmt: skip
    del job["spec"]["template"]["metadata"]["name"]
    control_plane.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    def complete() -> bool:
        status = control_plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/hello").get("status", {})
        return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions") or [])

    wait_for(complete, 40, "Job Complete")


def test_node_is_ready_with_capacity_and_labels(control_plane, kubelet: Kubelet) -> None:
    node = control_plane.request("GET", f"/api/v1/nodes/{NODE}")
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Test-GPU"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "2"
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    lease = control_plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
    assert lease["spec"]["holderIdentity"] == NODE
