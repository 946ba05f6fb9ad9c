"""Single-node experiments end to end: success with progress, a trainer failure, stability trials."""

from __future__ import annotations

import pytest
from e2e_kit import Cluster, tiny_lora_spec

pytestmark = [pytest.mark.k8s, pytest.mark.training]


def test_lora_experiment_succeeds_with_progress_and_results(cluster: Cluster, ns: str) -> None:
    """kubectl apply -> Job -> trainer on the CPU -> Succeeded, progress seen while it ran."""
    # ~30 ms a step: 80 steps keep the run going for seconds after rank 0's first report (at
    # step 1; the next ones come every 10 s, and at the end).
    cluster.apply(ns, "lora", tiny_lora_spec(maxSteps=80))
    run = cluster.follow(ns, "lora", timeout=150)
    assert run.final["phase"] == "Succeeded", run.final
    assert run.final["isValid"] is True and run.final["results"]["trainTokensPerSecond"] > 0, run.final
    assert run.final["environment"]["device"] == "cpu"
    midway = [p for p in run.progress_while_running() if p["step"] < p["totalSteps"] == 80]
    assert midway, f"no progress seen mid-run: {run.seen}"
    assert run.final["progress"]["step"] == 80
    assert [j.metadata.name for j in cluster.batch.list_namespaced_job(ns).items] == ["lora-a0"]
