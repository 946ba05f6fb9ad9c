"""The scheduler's part: whether a pending pod fits this node, and the Binding that places it.

Pure. The local kubelet is the only node of a dev cluster, so scheduling is a fit check against
its labels and its free ``nvidia.com/gpu`` count; a pod that does not fit gets the reason as an
``Unschedulable`` message, like ``kubectl describe`` shows on a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from ftbench.contracts.kube import Obj

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_SCHEDULER = "default-scheduler"


def gpu_request(pod: Obj) -> int:
    """The pod's GPUs: each container's request, else its limit (a limit alone implies the request)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        amount = (res.get("requests") or {}).get(GPU_RESOURCE) or (res.get("limits") or {}).get(GPU_RESOURCE) or 0
        total += int(amount)
    return total


def ours_to_schedule(pod: Obj) -> bool:
    """Whether the default scheduler would consider the pod (not being deleted, no other scheduler)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return not meta.get("deletionTimestamp") and spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER


def unfit_reason(pod: Obj, node_name: str, labels: Mapping[str, str], gpus: int, gpus_in_use: int) -> str:
    """Why the pod does not fit the node, or "" when it does."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return f"node {node_name} does not match nodeSelector {selector} (labels: --label k=v)"
    if (want := gpu_request(pod)) and want + gpus_in_use > gpus:
        return f"node {node_name} has {gpus} {GPU_RESOURCE}, {gpus_in_use} in use; pod requests {want}"
    return ""


def binding(pod: Obj, node_name: str) -> Obj:
    """The Binding subresource body that assigns the pod to the node."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }
