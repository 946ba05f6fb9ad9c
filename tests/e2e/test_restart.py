"""The operator and the nodes' kubelets all die mid-training and come back: nothing doubles, nothing is lost."""

from __future__ import annotations

import time

import pytest
from e2e_kit import Cluster, poll, tiny_lora_spec

pytestmark = [pytest.mark.k8s, pytest.mark.training]


def test_operator_and_kubelet_restarted_mid_run(cluster: Cluster, ns: str) -> None:
    cluster.apply(ns, "restart", tiny_lora_spec(maxSteps=200))
    # Rank 0's first progress report (step 1) means the trainer is in its training loop.
    poll(lambda: cluster.experiment(ns, "restart").get("status", {}).get("progress"), 90, "first progress report")
    [pod] = cluster.pods(ns)
    cluster.operator.kill()
    cluster.kubelets.kill()
    time.sleep(1)  # the trainer goes on alone; its process belongs to no component
    cluster.kubelets.start()
    cluster.operator.start()

    run = cluster.follow(ns, "restart", timeout=150)
    assert run.final["phase"] == "Succeeded", run.final
    assert run.final["results"]["trainSteps"] == 200 and run.final["results"]["trainTokensPerSecond"] > 0
    assert [j.metadata.name for j in cluster.batch.list_namespaced_job(ns).items] == ["restart-a0"]
    after = cluster.pods(ns)
    assert [(p.metadata.name, p.metadata.uid) for p in after] == [(pod.metadata.name, pod.metadata.uid)]
    assert after[0].status.container_statuses[0].restart_count == 0
    assert cluster.pod_log(ns, pod.metadata.name).count("FTBENCH_RESULT") == 1  # one training run, adopted
