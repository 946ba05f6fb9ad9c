"""Kubeflow's PyTorchJob controller, reduced to what one run needs: the rig has no training operator
(its v1.9 controller needs a newer Kubernetes than the rig's 1.20), so the multi-node tests play it.

It does what the controller would: pods and a headless Service per replica from the PyTorchJob's
templates, the rendezvous env, and the job's conditions from the pods' phases; kube-scheduler then
places the pods like any other.
"""

from __future__ import annotations

import copy
from typing import Any

from e2e_kit import Cluster

from ftbench.contracts.kube import Obj

KUBEFLOW = ("kubeflow.org", "v1", "pytorchjobs")
DEFAULT_PORT = 23456  # Kubeflow's default when the container names no pytorchjob-port


class TrainingOperator:
    """Kubeflow's PyTorchJob controller, reduced to what one run needs; `sync` is called in a loop."""

    def __init__(self, cluster: Cluster, namespace: str, job_name: str) -> None:
        self.cluster, self.namespace, self.job_name = cluster, namespace, job_name
        self.created = False
        self.conditions: list[str] = []

    def sync(self) -> None:
        job = self.cluster.custom.get_namespaced_custom_object(
            *KUBEFLOW[:2], self.namespace, KUBEFLOW[2], self.job_name
        )
        if not self.created:
            self._create_replicas(job)
            self.created = True
        phases = {p.metadata.name: p.status.phase for p in self.cluster.pods(self.namespace, self.selector())}
        wanted = ["Created"]
        if any(phase in ("Running", "Succeeded") for phase in phases.values()):
            wanted.append("Running")
        if any(phase == "Failed" for phase in phases.values()):
            wanted.append("Failed")
        elif phases.get(f"{self.job_name}-master-0") == "Succeeded":
            wanted.append("Succeeded")  # Kubeflow's default success policy: the master decides
        if wanted != self.conditions:
            self._write_conditions(wanted)

    def selector(self) -> str:
        return f"training.kubeflow.org/job-name={self.job_name}"

    def _create_replicas(self, job: Obj) -> None:
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": self.job_name,
                 "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        replicas = job["spec"]["pytorchReplicaSpecs"]
        total = sum(int(r.get("replicas", 1)) for r in replicas.values())
        rank = 0
        for replica_type in ("Master", "Worker"):
            for index in range(int(replicas.get(replica_type, {}).get("replicas", 0))):
                pod, service = self._replica(job, replica_type, index, rank, total, owner)
                self.cluster.core.create_namespaced_service(self.namespace, service)
                self.cluster.core.create_namespaced_pod(self.namespace, pod)
                rank += 1

    def _replica(self, job: Obj, replica_type: str, index: int, rank: int, total: int, owner: Obj) -> tuple[Obj, Obj]:
        """A replica's pod (template + Kubeflow's labels and env) and its headless Service."""
        name = f"{self.job_name}-{replica_type.lower()}-{index}"
        labels = {
            "training.kubeflow.org/job-name": self.job_name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": replica_type.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        template = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"][replica_type]["template"])
        container = next(c for c in template["spec"]["containers"] if c["name"] == "pytorch")
        port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "pytorchjob-port"),
                    DEFAULT_PORT)  # fmt: skip
        env = {
            "MASTER_ADDR": f"{self.job_name}-master-0", "MASTER_PORT": str(port), "RANK": str(rank),
            "WORLD_SIZE": str(total), "PET_NNODES": str(total), "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": str(job["spec"].get("nprocPerNode", "auto")), "PYTHONUNBUFFERED": "1",
        }  # fmt: skip
        container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
        meta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
            "metadata": {**meta, "name": name, "labels": {**meta.get("labels", {}), **labels}, "ownerReferences": [owner]},
        }  # fmt: skip
        service = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "pytorchjob-port", "port": port}]},
        }  # fmt: skip
        return pod, service

    def _write_conditions(self, types: list[str]) -> None:
        now = _now()
        conditions: list[dict[str, Any]] = [
            {"type": t, "status": "True", "reason": f"PyTorchJob{t}", "message": f"PyTorchJob {self.job_name} is {t.lower()}.",
             "lastUpdateTime": now, "lastTransitionTime": now}
            for t in types
        ]  # fmt: skip
        for earlier in conditions[:-1]:  # Kubeflow keeps one True condition: the latest
            earlier["status"] = "False"
        self.cluster.custom.patch_namespaced_custom_object_status(
            *KUBEFLOW[:2], self.namespace, KUBEFLOW[2], self.job_name, {"status": {"conditions": conditions}}
        )
        self.conditions = types


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
