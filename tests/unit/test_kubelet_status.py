"""The local kubelet's pure parts: pod statuses, scheduling fit, node bodies, the client's error.

No control plane and no processes: these are the shapes the Job controller and the operator read,
so they are pinned here; tests/devcluster/test_kubelet.py checks them against a real API server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ftbench.contracts.kube import Obj
from ftbench.host.procs import pid_alive
from ftbench.kubeapi import KubeError
from ftbench_devcluster.kubelet import Rest, kill_all_pods, scheduling
from ftbench_devcluster.kubelet import pod_status as S
from ftbench_devcluster.kubelet.node import lease_spec, node_conditions, node_labels, node_status
from ftbench_devcluster.kubelet.pod_state import ContainerRun, PodRun, pid_runs

T0, T1 = "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z"


def _pod(*containers: Obj, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": list(containers), **spec},
    }


def _run(tmp_path: Path, pod: Obj, *names: str) -> PodRun:
    run = PodRun("ns", "p", "u-1", tmp_path, "127.100.0.2", "p", "", {}, T0, pod=pod)
    for name in names:
        run.containers[name] = ContainerRun(name, tmp_path / "containers" / name, started_at=T0)
    return run


def test_running_status_is_ready_with_every_container_running(tmp_path: Path) -> None:
    run = _run(tmp_path, _pod({"name": "a", "image": "img:1"}, {"name": "b"}), "a", "b")
    status = S.running_status(run, T1)
    assert status["phase"] == "Running"
    assert (status["podIP"], status["podIPs"], status["hostIP"]) == (run.ip, [{"ip": run.ip}], "127.0.0.1")
    assert status["startTime"] == T0
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True",
    }  # fmt: skip
    a, b = status["containerStatuses"]
    assert a == {
        "name": "a", "image": "img:1", "imageID": "", "containerID": "ftbench-local://u-1/a", "restartCount": 0,
        "ready": True, "started": True, "state": {"running": {"startedAt": T0}},
    }  # fmt: skip
    assert b["image"] == ""


def test_terminated_state_prefers_the_exit_record_then_the_message_file(tmp_path: Path) -> None:
    run = _run(tmp_path, _pod({"name": "a"}), "a")
    c = run.containers["a"]
    c.result = {"exitCode": 0, "startedAt": T0, "finishedAt": T1}
    state = S.terminated_state(run, c, termination_message='{"ok": 1}', log_tail="log", at="later")
    assert state == {
        "exitCode": 0, "reason": "Completed", "startedAt": T0, "finishedAt": T1,
        "containerID": "ftbench-local://u-1/a", "message": '{"ok": 1}',
    }  # fmt: skip
    c.result = {"exitCode": 3, "message": "from podrun"}
    state = S.terminated_state(run, c, termination_message="file", log_tail="log", at=T1)
    assert (state["reason"], state["message"], state["startedAt"], state["finishedAt"]) == (
        "Error",
        "from podrun",
        T0,
        T1,
    )


def test_the_log_tail_is_the_message_only_for_a_failure_under_fallback_to_logs(tmp_path: Path) -> None:
    fallback = _pod({"name": "a", "terminationMessagePolicy": "FallbackToLogsOnError"})
    run = _run(tmp_path, fallback, "a")
    c = run.containers["a"]
    c.result = {"exitCode": 1}
    assert S.terminated_state(run, c, termination_message=" ", log_tail="Traceback", at=T1)["message"] == "Traceback"
    c.result = {"exitCode": 0}
    assert S.terminated_state(run, c, termination_message="", log_tail="Traceback", at=T1).get("message") is None
    plain = _run(tmp_path, _pod({"name": "a"}), "a")
    plain.containers["a"].result = {"exitCode": 1}
    state = S.terminated_state(plain, plain.containers["a"], termination_message="", log_tail="Traceback", at=T1)
    assert "message" not in state


def test_a_container_without_exit_record_counts_as_killed(tmp_path: Path) -> None:
    run = _run(tmp_path, _pod({"name": "a"}), "a")
    c = run.containers["a"]
    state = S.terminated_state(run, c, termination_message="", log_tail="", at=T1)
    assert (state["exitCode"], state["reason"]) == (137, "Error")
    assert S.killed_exit(T0, T1) == {
        "exitCode": 137, "reason": "Error", "message": "the container's process was killed",
        "startedAt": T0, "finishedAt": T1,
    }  # fmt: skip


def test_finished_status_phase_and_kubelet_restart_reason(tmp_path: Path) -> None:
    run = _run(tmp_path, _pod({"name": "a"}, {"name": "b"}), "a", "b")
    ok = {"exitCode": 0, "reason": "Completed"}
    status = S.finished_status(run, {"a": ok, "b": ok}, T1)
    assert status["phase"] == "Succeeded" and "reason" not in status
    assert {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}["Ready"] == (
        "False",
        "PodCompleted",
    )
    assert status["containerStatuses"][0]["state"] == {"terminated": ok}
    assert not status["containerStatuses"][0]["ready"]
    lost = S.lost_on_restart_exit(T0, T1)
    assert (lost["exitCode"], lost["reason"]) == (137, "KubeletRestarted")
    status = S.finished_status(run, {"a": ok, "b": {**lost}}, T1)
    assert (status["phase"], status["reason"]) == ("Failed", "KubeletRestarted")


def test_pending_statuses() -> None:
    pod = _pod({"name": "a", "image": "img"})
    status = S.config_error_status(pod, "configmap x not found")
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "CreateContainerConfigError", "message": "configmap x not found"}
    }
    unschedulable = S.unschedulable_status("no GPUs", T0)
    assert unschedulable["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "no GPUs",
            "lastTransitionTime": T0,
        }
    ]
    assert S.lost_state_status()["reason"] == "KubeletRestarted"
    assert S.started_reported({"containerStatuses": [{"state": {"terminated": {}}}]})
    assert not S.started_reported({"containerStatuses": [{"state": {"waiting": {}}}]})
    assert not S.started_reported({})


def test_scheduling_fit() -> None:
    gpu = {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    pod = _pod(gpu, {"name": "b", "resources": {"requests": {"nvidia.com/gpu": 1}}}, nodeSelector={"gpu": "A100"})
    assert scheduling.gpu_request(pod) == 3
    assert scheduling.unfit_reason(pod, "n", {"gpu": "A100"}, gpus=4, gpus_in_use=0) == ""
    assert "has 4 nvidia.com/gpu, 2 in use; pod requests 3" in scheduling.unfit_reason(pod, "n", {"gpu": "A100"}, 4, 2)
    assert "does not match nodeSelector" in scheduling.unfit_reason(pod, "n", {"gpu": "H100"}, 4, 0)
    assert scheduling.ours_to_schedule(pod)
    assert not scheduling.ours_to_schedule(_pod(schedulerName="volcano"))
    deleting = _pod()
    deleting["metadata"]["deletionTimestamp"] = T0
    assert not scheduling.ours_to_schedule(deleting)
    assert scheduling.binding(pod, "n") == {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n"},
    }  # fmt: skip


def test_node_bodies() -> None:
    labels = node_labels("n", {"kubernetes.io/os": "custom", "gpu": "A100"}, "x86_64")
    assert labels["kubernetes.io/arch"] == "amd64" and labels["ftbench.io/local-kubelet"] == "true"
    assert (labels["kubernetes.io/os"], labels["gpu"], labels["kubernetes.io/hostname"]) == ("custom", "A100", "n")
    status = node_status("n", cpus=8, memory=1024, gpus=2, kernel="6.1", machine="aarch64")
    assert status["capacity"] == status["allocatable"] == {
        "cpu": "8", "memory": "1024Ki", "pods": "110", "nvidia.com/gpu": "2",
    }  # fmt: skip
    assert status["nodeInfo"]["architecture"] == "arm64"
    conditions = {c["type"]: c["status"] for c in node_conditions(T0)}
    assert conditions == {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}
    assert lease_spec("n", T0) == {"holderIdentity": "n", "leaseDurationSeconds": 40, "renewTime": T0}


class _Response:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data = status, data

    def read(self) -> bytes:
        return self.data


class _Api:
    """The two `kubernetes.client.ApiClient` methods `Rest` uses; answers from a queue."""

    configuration = SimpleNamespace(host="https://127.0.0.1:6443")

    def __init__(self, *answers: _Response | Exception) -> None:
        self.answers = list(answers)

    def param_serialize(self, method: str, path: str, **_: Any) -> tuple[str, str]:
        return method, path

    def call_api(self, *_: Any, **__: Any) -> _Response:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_rest_has_one_error_type() -> None:
    rest = Rest(_Api(_Response(200, b'{"a": 1}'), _Response(200, b""), _Response(404, b"nope"), _Response(404, b"x")))
    assert rest.server == "https://127.0.0.1:6443"
    assert rest.call("GET", "/x") == {"a": 1}
    assert rest.call("GET", "/x") == {}
    assert rest.call("GET", "/x", missing_ok=True) is None
    with pytest.raises(KubeError, match="HTTP 404: x") as err:
        rest.call("GET", "/x")
    assert err.value.status == 404
    with pytest.raises(KubeError, match="ConnectionRefusedError") as err:
        Rest(_Api(ConnectionRefusedError("refused"))).call("GET", "/x")
    assert err.value.status == 0
    with pytest.raises(KubeError, match="not JSON"):
        Rest(_Api(_Response(200, b"<html>"))).call("GET", "/x")


def test_process_identity_and_kill_all_pods(tmp_path: Path) -> None:
    assert pid_alive(os.getpid())
    cdir = tmp_path / "pods" / "ns_p_u" / "containers" / "main"
    cdir.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(cdir)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd (before, its cmdline is pytest's)
        while not pid_runs(proc.pid, str(cdir)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_runs(proc.pid, str(cdir))
        assert not pid_runs(proc.pid, str(tmp_path))  # a reused pid: someone else's process
        (cdir / "pid").write_text(f'{{"pid": {proc.pid}, "startedAt": "{T0}"}}')
        assert kill_all_pods(tmp_path) == 1
        assert proc.wait(10) == -signal.SIGKILL
        assert not pid_alive(proc.pid) and not pid_runs(proc.pid, str(cdir))
    finally:
        proc.kill()
        proc.wait()
