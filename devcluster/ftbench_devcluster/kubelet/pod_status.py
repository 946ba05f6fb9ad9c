"""Pod statuses as a real kubelet reports them, built from what the local kubelet knows.

Pure: every function takes the time (``at``) and the file contents it needs, so the statuses the
Job controller and the operator read can be checked without a control plane or a process. The
kubelet (``runner``) reads the files and patches what these return.
"""

from __future__ import annotations

from collections.abc import Mapping

from ftbench.contracts.kube import Obj
from ftbench_devcluster.kubelet.pod_state import ContainerRun, PodRun

HOST_IP = "127.0.0.1"
TERMINAL = ("Succeeded", "Failed")
KUBELET_RESTARTED = "KubeletRestarted"
LOST_PROCESS_EXIT_CODE = 137  # what a SIGKILLed process exits with


def container_id(uid: str, name: str) -> str:
    return f"ftbench-local://{uid}/{name}"


def conditions(ready: bool, at: str, reason: str = "") -> list[Obj]:
    """PodScheduled and Initialized true; ContainersReady and Ready as ``ready``."""
    out = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at},
        {"type": "Initialized", "status": "True", "lastTransitionTime": at},
    ]
    for kind in ("ContainersReady", "Ready"):
        cond = {"type": kind, "status": str(ready), "lastTransitionTime": at}
        if reason:
            cond["reason"] = reason
        out.append(cond)
    return out


def container_base(run: PodRun, name: str) -> Obj:
    """The fields of a container status that do not depend on its state."""
    return {
        "name": name,
        "image": run.container_spec(name).get("image", ""),
        "imageID": "",
        "containerID": container_id(run.uid, name),
        "restartCount": 0,
    }


def _pod_fields(run: PodRun, phase: str) -> Obj:
    return {
        "phase": phase, "hostIP": HOST_IP, "podIP": run.ip, "podIPs": [{"ip": run.ip}],
        "startTime": run.start_time,
    }  # fmt: skip


def running_status(run: PodRun, at: str) -> Obj:
    """Phase Running, every container running since it started, the pod Ready."""
    statuses = [
        {
            **container_base(run, c.name),
            "ready": True,
            "started": True,
            "state": {"running": {"startedAt": c.started_at}},
        }
        for c in run.containers.values()
    ]
    return {**_pod_fields(run, "Running"), "conditions": conditions(True, at), "containerStatuses": statuses}


def terminated_state(run: PodRun, c: ContainerRun, *, termination_message: str, log_tail: str, at: str) -> Obj:
    """``state.terminated`` from the exit record, else the termination message file, else (for a
    failure under ``FallbackToLogsOnError``) the log tail."""
    res = c.result or {}
    code = int(res.get("exitCode", LOST_PROCESS_EXIT_CODE))
    message = res.get("message") or termination_message
    policy = run.container_spec(c.name).get("terminationMessagePolicy")
    if not message.strip() and code != 0 and policy == "FallbackToLogsOnError":
        message = log_tail
    state = {
        "exitCode": code, "reason": res.get("reason") or ("Completed" if code == 0 else "Error"),
        "startedAt": res.get("startedAt") or c.started_at, "finishedAt": res.get("finishedAt") or at,
        "containerID": container_id(run.uid, c.name),
    }  # fmt: skip
    if message:
        state["message"] = message
    return state


def finished_status(run: PodRun, states: Mapping[str, Obj], at: str) -> Obj:
    """Succeeded if every container exited 0, else Failed; ``states`` by container name."""
    phase = "Succeeded" if all(s["exitCode"] == 0 for s in states.values()) else "Failed"
    statuses = [
        {**container_base(run, name), "ready": False, "started": False, "state": {"terminated": s}}
        for name, s in states.items()
    ]
    status: Obj = {
        **_pod_fields(run, phase), "conditions": conditions(False, at, "PodCompleted"), "containerStatuses": statuses,
    }  # fmt: skip
    if any(s["reason"] == KUBELET_RESTARTED for s in states.values()):
        status.update(reason=KUBELET_RESTARTED, message="the local kubelet restarted and lost the pod's process")
    return status


def killed_exit(started_at: str, at: str) -> Obj:
    """The exit record of a container whose process ended without writing one."""
    return {
        "exitCode": LOST_PROCESS_EXIT_CODE, "reason": "Error", "message": "the container's process was killed",
        "startedAt": started_at, "finishedAt": at,
    }  # fmt: skip


def lost_on_restart_exit(started_at: str, at: str) -> Obj:
    """The exit record of a container a restarted kubelet found neither running nor finished."""
    return {
        "exitCode": LOST_PROCESS_EXIT_CODE, "reason": KUBELET_RESTARTED, "startedAt": started_at, "finishedAt": at,
        "message": "the local kubelet restarted and the container's process was gone",
    }  # fmt: skip


def lost_state_status() -> Obj:
    """A pod started by a kubelet whose state dir this one does not have."""
    return {"phase": "Failed", "reason": KUBELET_RESTARTED, "message": "the local kubelet lost this pod's state"}


def config_error_status(pod: Obj, message: str) -> Obj:
    """Pending with every container waiting in ``CreateContainerConfigError`` (a missing reference)."""
    waiting = [
        {"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
         "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}}}
        for c in pod["spec"]["containers"]
    ]  # fmt: skip
    return {"phase": "Pending", "hostIP": HOST_IP, "containerStatuses": waiting}


def unschedulable_status(message: str, at: str) -> Obj:
    """Pending with PodScheduled false, as the scheduler reports a pod that fits no node."""
    condition = {
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastTransitionTime": at,
    }  # fmt: skip
    return {"phase": "Pending", "conditions": [condition]}


def started_reported(status: Obj) -> bool:
    """Whether a pod's status says some container has run (so some kubelet started it)."""
    return any(set(cs.get("state") or {}) & {"running", "terminated"} for cs in status.get("containerStatuses") or [])
