"""The Node object of the local kubelet: registration, Ready heartbeat and node Lease.

The node controller marks a node NotReady (and evicts its pods) when neither its Ready condition
nor its Lease in ``kube-node-lease`` is renewed, so the kubelet renews both every
``HEARTBEAT_SECONDS``. The bodies are built by pure functions; `Node` sends them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import LOCAL_KUBELET_LABEL
from ftbench_devcluster.kubelet.client import Rest
from ftbench_devcluster.kubelet.pod_status import HOST_IP
from ftbench_devcluster.kubelet.scheduling import GPU_RESOURCE
from ftbench_devcluster.podrun import now

log = logging.getLogger("ftbench.kubelet")

HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
LEASE_NAMESPACE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def memory_kib() -> int:
    """MemTotal of this machine (8 GiB if /proc/meminfo cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 8 * 1024 * 1024


def micro_time() -> str:
    """A Kubernetes MicroTime (what a Lease's renewTime must be)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def arch_label(machine: str) -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_labels(name: str, extra: Mapping[str, str], machine: str) -> dict[str, str]:
    """The well-known labels a kubelet sets, ours, then the ``--label`` ones (which win)."""
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch_label(machine),
        LOCAL_KUBELET_LABEL: "true",
        **extra,
    }


def node_status(
    name: str, *, cpus: int, memory: int, gpus: int, kernel: str, machine: str, extra: Mapping[str, str] | None = None
) -> Obj:
    """Capacity (= allocatable), addresses and node info; ``memory`` in KiB; ``extra``: quantities that win
    (extended resources a device plugin would advertise, the larger cpu and memory of the node it stands for)."""
    resources = {"cpu": str(cpus), "memory": f"{memory}Ki", "pods": "110", GPU_RESOURCE: str(gpus)}
    resources |= dict(extra or {})
    return {
        "capacity": resources,
        "allocatable": dict(resources),
        "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": kernel,
            "osImage": "ftbench local kubelet", "containerRuntimeVersion": "ftbench-local://1",
            "kubeletVersion": "v1.20.2-ftbench-local", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": arch_label(machine),
        },
    }  # fmt: skip


def node_conditions(at: str) -> list[Obj]:
    """No memory, disk or PID pressure; Ready."""
    pressures = (
        ("MemoryPressure", "SufficientMemory"),
        ("DiskPressure", "NoDiskPressure"),
        ("PIDPressure", "SufficientPID"),
    )
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHas{reason}",
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        }
        for kind, reason in pressures
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "ftbench local kubelet is posting ready status",
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        }
    )
    return conditions


def lease_spec(name: str, renew_time: str) -> Obj:
    return {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": renew_time}


class Node:
    """Registers the Node object and keeps it Ready."""

    def __init__(
        self,
        rest: Rest,
        name: str,
        labels: Mapping[str, str],
        gpus: int,
        *,
        resources: Mapping[str, str] | None = None,
        taints: list[Obj] | None = None,
    ) -> None:
        self.rest = rest
        self.name = name
        self.extra_labels = dict(labels)
        self.gpus = gpus
        self.resources = dict(resources or {})
        self.taints = list(taints or [])
        self.labels = node_labels(name, self.extra_labels, platform.machine())

    def register(self) -> None:
        """Create the Node (or refresh its labels and taints), post its status, then the first heartbeat."""
        spec = {"taints": self.taints or None}  # None clears the taints a previous registration set
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": spec,
        }
        if self.rest.call("POST", "/api/v1/nodes", body, missing_ok=True) is None:  # exists: refresh
            self.rest.call(
                "PATCH", f"/api/v1/nodes/{self.name}", {"metadata": {"labels": self.labels}, "spec": spec}, patch=True
            )
        status = node_status(
            self.name, cpus=os.cpu_count() or 1, memory=memory_kib(), gpus=self.gpus, kernel=platform.release(),
            machine=platform.machine(), extra=self.resources,
        )  # fmt: skip
        # A resource an earlier registration advertised and this one does not (a device plugin gone) is removed:
        # a merge patch keeps the keys it does not name.
        before = (self.rest.call("GET", f"/api/v1/nodes/{self.name}") or {}).get("status") or {}
        for key in ("capacity", "allocatable"):
            status[key] |= {k: None for k in before.get(key) or {} if k not in status[key]}
        self.rest.call("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": status}, patch=True)
        self.heartbeat()
        log.info(
            "node %s registered (%s GPUs, labels %s, resources %s, taints %s)",
            self.name, self.gpus, self.extra_labels, self.resources, self.taints,
        )  # fmt: skip

    def heartbeat(self) -> None:
        """Renew the Ready condition and the Lease (created if missing)."""
        conditions = node_conditions(now())
        self.rest.call("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": {"conditions": conditions}}, patch=True)
        spec = lease_spec(self.name, micro_time())
        renewed = self.rest.call(
            "PATCH", f"{LEASE_NAMESPACE_PATH}/{self.name}", {"spec": spec}, patch=True, missing_ok=True
        )
        if renewed is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": spec,
            }
            self.rest.call("POST", LEASE_NAMESPACE_PATH, body, missing_ok=True)

    def heartbeat_loop(self, stop: threading.Event) -> None:
        """Heartbeat every ``HEARTBEAT_SECONDS`` until ``stop``; a failed one is logged, not fatal."""
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                self.heartbeat()
            except Exception:
                log.exception("heartbeat failed")
