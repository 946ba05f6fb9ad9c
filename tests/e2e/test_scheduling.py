"""What kube-scheduler refuses on the rig, as on a cluster: a pod no node can take stays Pending with
``FailedScheduling``, and the experiment says why (until the profile's pendingDeadlineSeconds ends it)."""

from __future__ import annotations

import pytest
from e2e_kit import NODES, PROFILE, RIG_GPU_MODEL, RIG_NODE, Cluster, poll, tiny_lora_spec

from ftbench.contracts.kube import Obj

pytestmark = [pytest.mark.k8s]


@pytest.mark.parametrize(
    ("gpus", "model", "why"),
    [
        (4, RIG_GPU_MODEL, "2 Insufficient nvidia.com/gpu"),
        (1, "NVIDIA-H100-80GB-HBM3", "2 node(s) didn't match Pod's node affinity"),
    ],
    ids=["more-gpus-than-a-node-has", "a-gpu-model-no-node-has"],
)
def test_a_pod_no_node_can_take_is_failed_scheduling(
    cluster: Cluster, ns: str, gpus: int, model: str, why: str
) -> None:
    """The rig's two nodes have two A100s each: four, or an H100, fit none of them. The scheduler's own
    message reaches the experiment's Running condition, and its FailedScheduling event is on the pod."""
    cluster.apply(ns, "no-node", tiny_lora_spec(numberGpus=gpus, gpuModel=model, batchSize=4))

    def unschedulable() -> Obj | None:
        status = cluster.experiment(ns, "no-node").get("status") or {}
        assert status.get("phase") not in ("Invalid", "Failed"), status
        running = next((c for c in status.get("conditions") or [] if c["type"] == "Running"), {})
        return running if running.get("reason") == "Unschedulable" else None

    running = poll(unschedulable, 120, "the experiment's Running condition to say Unschedulable")
    assert f"0/2 nodes are available: {why}" in running["message"], running
    events = [e for e in cluster.core.list_namespaced_event(ns).items if e.reason == "FailedScheduling"]
    assert events and all(why in e.message for e in events), [e.message for e in events]
    assert all(p.spec.node_name is None for p in cluster.pods(ns))


def test_a_two_node_indexed_job_is_placed_on_two_nodes(cluster: Cluster, ns: str) -> None:
    """The IndexedJob runtime's Job, as a cluster with Indexed Jobs (>= 1.24) gets it, lands one pod per node.

    The rig's 1.20 API server drops completionMode (it has no Indexed Jobs), so its Job controller makes the
    two pods without completion indexes and they cannot train; what is checked is where kube-scheduler puts
    the pods of that template: on two nodes, by the rendered anti-affinity."""
    profile = PROFILE | {"features": {**PROFILE["features"], "indexedJobs": True}}
    with cluster.profile(profile, RIG_NODE):
        cluster.apply(ns, "indexed", tiny_lora_spec(numberNodes=2, run={"runtime": "IndexedJob"}))
        assert cluster.placement(ns, "indexed", 2) == sorted(NODES)
        # The operator records the Job it made after creating it: its pods can be placed before that patch lands.
        job = poll(lambda: (cluster.experiment(ns, "indexed").get("status") or {}).get("job"), 60, "status.job")
        assert job["kind"] == "Job"
        cluster.delete(ns, "indexed")
