"""Every GPU example in examples/ on the cluster it is written for, unchanged: kube-scheduler places it on
nodes like an 8 x A100 node (the RoCE ones with examples/profiles/roce-cluster.yaml, their RDMA devices and
the taint its toleration is for), on as many nodes as it asks for. Nothing trains (the rig's GPUs are
counted, not there); what is checked is what a cluster checks before anything runs: claims, node selector,
GPU, CPU, memory and RDMA requests, taints, one pod per node.

The CPU examples train elsewhere in tests/e2e: fsdp-cpu.yaml (test_single_node), sweep.yaml (test_sweep),
the RoCE example scaled to the CPU (test_multi_node); quickstart.yaml here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_kit import PYTORCHJOB_CRD_FILE, REPO_EXAMPLES, Cluster, on_the_rig
from training_operator import TrainingOperator

from ftbench.api.profile import ClusterProfile
from ftbench_devcluster.rig import RigNode

pytestmark = [pytest.mark.k8s]

ROCE_PROFILE = REPO_EXAMPLES / "profiles" / "roce-cluster.yaml"
A100_NODE = RigNode(gpus=8, gpu_model="NVIDIA-A100-SXM4-80GB", cpu="128", memory="2Ti")  # a DGX A100's


def _doc(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


GPU_EXAMPLES = [
    p for p in sorted(REPO_EXAMPLES.glob("*.yaml"))
    if _doc(p)["kind"] == "FineTuneExperiment" and _doc(p)["spec"].get("numberGpus", 0)
    and _doc(p)["spec"].get("device", "gpu") != "cpu"
]  # fmt: skip


def test_the_gpu_examples_are_found() -> None:
    assert {p.name for p in GPU_EXAMPLES} >= {"full.yaml", "lora.yaml", "multi-node-roce.yaml", "stability.yaml"}


@pytest.mark.parametrize("roce", [False, True], ids=["plain-gpu-cluster", "roce-cluster"])
def test_every_gpu_example_is_placed_as_on_its_cluster(cluster: Cluster, ns: str, roce: bool) -> None:
    examples = [p for p in GPU_EXAMPLES if bool(_doc(p)["spec"].get("enableRoce")) == roce]
    assert examples
    if any(_doc(p)["spec"].get("numberNodes", 1) > 1 for p in examples) and not PYTORCHJOB_CRD_FILE.exists():
        pytest.skip(f"upstream PyTorchJob CRD not found at {PYTORCHJOB_CRD_FILE} (set FTBENCH_SHARED_DIR)")
    profile = on_the_rig(_doc(ROCE_PROFILE) if roce else {})
    parsed = ClusterProfile.model_validate(profile)
    with cluster.profile(profile, A100_NODE):
        cluster.claims(ns, parsed)
        if parsed.roce.service_account:
            cluster.core.create_namespaced_service_account(ns, {"metadata": {"name": parsed.roce.service_account}})
        if parsed.roce.topology_config_map:
            topology = {"metadata": {"name": parsed.roce.topology_config_map}, "data": {"topo.xml": "<system/>"}}
            cluster.core.create_namespaced_config_map(ns, topology)
        for path in examples:  # one at a time: together they ask for more than the two nodes' 16 GPUs
            _placed(cluster, ns, _doc(path))


def _placed(cluster: Cluster, ns: str, doc: dict[str, Any]) -> None:
    """Apply the example, wait until kube-scheduler has placed its first attempt's pods (one per node), delete it."""
    name, spec = doc["metadata"]["name"], doc["spec"]
    cluster.apply(ns, name, spec)
    nodes = spec.get("numberNodes", 1)
    kubeflow = TrainingOperator(cluster, ns, f"{name}-a0") if nodes > 1 else None
    on = cluster.placement(ns, name, nodes, on_poll=kubeflow.sync if kubeflow else None)
    assert len(set(on)) == nodes, on
    cluster.delete(ns, name)


@pytest.mark.training
def test_quickstart_trains_on_the_rig(cluster: Cluster, ns: str) -> None:
    doc = _doc(REPO_EXAMPLES / "quickstart.yaml")
    cluster.apply(ns, doc["metadata"]["name"], doc["spec"])
    run = cluster.follow(ns, doc["metadata"]["name"], timeout=240)
    assert run.final["phase"] == "Succeeded", run.final
