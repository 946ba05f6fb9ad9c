"""A 2-"node" run through the PyTorchJob path, the test playing the Kubeflow training operator.

1.20 has no Indexed Jobs, so with ``features.trainingOperator`` the operator renders a
PyTorchJob. No training operator runs here: `TrainingOperator` does what it would (pods and a
headless Service per replica, the rendezvous env, the job's conditions); kube-scheduler puts the
two pods on the rig's two nodes, whose kubelets run them, and they rendezvous over gloo on the CPU
through the Service names.
"""

from __future__ import annotations

import pytest
import yaml
from e2e_kit import NODES, PYTORCHJOB_CRD_FILE, REPO_EXAMPLES, RIG_NODE, Cluster, on_the_rig, poll, tiny_lora_spec
from training_operator import TrainingOperator

from ftbench.api.profile import ClusterProfile

pytestmark = [pytest.mark.k8s, pytest.mark.training]


def test_two_node_pytorchjob_run(cluster: Cluster, ns: str) -> None:
    if not PYTORCHJOB_CRD_FILE.exists():
        pytest.skip(f"upstream PyTorchJob CRD not found at {PYTORCHJOB_CRD_FILE} (set FTBENCH_SHARED_DIR)")
    cluster.apply(ns, "two-nodes", tiny_lora_spec(numberNodes=2, maxSteps=10))
    poll(lambda: cluster.experiment(ns, "two-nodes").get("status", {}).get("job"), 120, "status.job")
    assert cluster.experiment(ns, "two-nodes")["status"]["job"]["kind"] == "PyTorchJob"
    kubeflow = TrainingOperator(cluster, ns, "two-nodes-a0")
    run = cluster.follow(ns, "two-nodes", timeout=180, on_poll=kubeflow.sync)
    assert run.final["phase"] == "Succeeded", run.final
    assert run.final["environment"]["worldSize"] == 2 and run.final["environment"]["numberNodes"] == 2
    assert run.final["results"]["trainTokensPerSecond"] > 0

    # The verdict comes from rank 0's termination message; the worker may still be shutting down then.
    def phases() -> dict[str, str]:
        kubeflow.sync()
        return {p.metadata.name: p.status.phase for p in cluster.pods(ns, kubeflow.selector())}

    want = {"two-nodes-a0-master-0": "Succeeded", "two-nodes-a0-worker-0": "Succeeded"}
    poll(lambda: phases() == want, 60, "both pods Succeeded")
    assert "Succeeded" in kubeflow.conditions
    # kube-scheduler placed them, one per node (the rendered anti-affinity), as the spec's numberNodes says.
    placed = sorted(p.spec.node_name for p in cluster.pods(ns, kubeflow.selector()))
    assert placed == sorted(NODES), placed


def test_roce_example_trains_with_its_profile(cluster: Cluster, ns: str) -> None:
    """examples/multi-node-roce.yaml on the cluster examples/profiles/roce-cluster.yaml describes: its nodes
    (RDMA devices, the taint its toleration is for), its read-only models volume with HF_HOME on the data
    volume, root pods with IPC_LOCK, its ServiceAccount and NCCL topology ConfigMap.

    What the rig cannot take from them is replaced, and only that: the profile's as `on_the_rig` says; the spec's
    70B on 16 A100s becomes the tiny model on one CPU rank per node, with the release whose image is built
    here, a short chars dataset and no requireRoce (gloo between CPU ranks is no RoCE)."""
    if not PYTORCHJOB_CRD_FILE.exists():
        pytest.skip(f"upstream PyTorchJob CRD not found at {PYTORCHJOB_CRD_FILE} (set FTBENCH_SHARED_DIR)")
    profile = on_the_rig(yaml.safe_load((REPO_EXAMPLES / "profiles" / "roce-cluster.yaml").read_text()))
    spec = yaml.safe_load((REPO_EXAMPLES / "multi-node-roce.yaml").read_text())["spec"]
    for cpu_cannot in ("gpuModel", "fmsHfTuningVersion"):
        del spec[cpu_cannot]
    spec |= {k: v for k, v in tiny_lora_spec(maxSteps=6).items() if k not in ("experiment", "engine")}
    spec["run"] = {**spec["run"], "requireRoce": False}
    roce = ClusterProfile.model_validate(profile)
    assert roce.storage.models.read_only and roce.storage.hf_home.startswith(roce.storage.data.mount_path)
    with cluster.profile(profile, RIG_NODE):
        cluster.claims(ns, roce)
        # The account an admin creates for root pods with IPC_LOCK; the operator binds its progress Role to it.
        cluster.core.create_namespaced_service_account(ns, {"metadata": {"name": roce.roce.service_account}})
        topology = {"metadata": {"name": roce.roce.topology_config_map}, "data": {"topo.xml": "<system/>"}}
        cluster.core.create_namespaced_config_map(ns, topology)
        nodes = [cluster.core.read_node(n) for n in NODES]
        assert all(n.status.capacity[roce.roce.device_resource] == str(roce.roce.device_count) for n in nodes)
        assert all([t.key for t in n.spec.taints or []] == ["nvidia.com/gpu"] for n in nodes)

        cluster.apply(ns, "roce", spec)
        poll(lambda: cluster.experiment(ns, "roce").get("status", {}).get("job"), 120, "status.job")
        kubeflow = TrainingOperator(cluster, ns, "roce-a0")
        run = cluster.follow(ns, "roce", timeout=300, on_poll=kubeflow.sync)
        assert run.final["phase"] == "Succeeded", run.final
        assert run.final["environment"]["numberNodes"] == 2 and run.final["results"]["trainTokensPerSecond"] > 0
        pods = cluster.pods(ns, kubeflow.selector())
        assert sorted(p.spec.node_name for p in pods) == sorted(NODES)
        for pod in pods:
            [container] = pod.spec.containers
            assert container.resources.requests[roce.roce.device_resource] == str(roce.roce.device_count)
            mounts = {m.mount_path: m for m in container.volume_mounts}
            assert mounts[roce.storage.models.mount_path].read_only is True
            env = {e.name: e.value for e in container.env if e.value is not None}
            assert env["HF_HOME"] == roce.storage.hf_home
        if cluster.images:  # in the trainer image, as root (the profile's roce.runAsRoot)
            specs = cluster.container_specs(ns)
            assert specs and all(s["rootfs"] and s["user"]["uid"] == 0 for s in specs), specs
