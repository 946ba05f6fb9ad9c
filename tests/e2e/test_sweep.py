"""A FineTuneSweep end to end: examples/sweep.yaml (2x2 on the tiny model, CPU) through the operator,
the local kubelet and real training, down to the sweep's table."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from e2e_kit import TERMINAL, Cluster, poll

from ftbench.api.resource import GROUP, PLURAL, SWEEP_PLURAL, VERSION
from ftbench.contracts.labels import SWEEP_LABEL

pytestmark = [pytest.mark.k8s, pytest.mark.training]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep.yaml"


def test_example_sweep_succeeds_with_a_full_table(cluster: Cluster, ns: str) -> None:
    """kubectl apply of the example (5 steps a run) -> 4 child experiments, 2 at a time -> a
    Succeeded sweep whose 4 rows all measured tokens/s."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["template"]["maxSteps"] = 5
    name = doc["metadata"]["name"]
    subprocess.run(
        ["kubectl", "apply", "-n", ns, "-f", "-"],
        input=json.dumps(doc).encode(), env={**os.environ, "KUBECONFIG": str(cluster.control_plane.kubeconfig)},
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def finished() -> dict | None:
        sweep = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, ns, SWEEP_PLURAL, name)
        status = sweep.get("status") or {}
        return status if status.get("phase") in TERMINAL else None

    status = poll(finished, 480, f"sweep {name} to finish", interval=1.0)
    assert status["phase"] == "Succeeded", status
    assert status["progress"] == "4/4" and status["counts"]["succeeded"] == 4, status
    rows = status["points"]
    assert len(rows) == 4 and all(r["phase"] == "Succeeded" and r["trainTokensPerSecond"] > 0 for r in rows), rows
    assert status["best"]["value"] > 0 and status["bestTrainTokensPerSecond"] > 0
    children = cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, label_selector=f"{SWEEP_LABEL}={name}"
    )["items"]
    assert len(children) == 4 and all(c["status"]["environment"]["device"] == "cpu" for c in children)
