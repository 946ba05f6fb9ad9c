"""`ftbench dev up/status/down` as a user runs them: a detached cluster that really stops."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftbench.host.procs import pid_alive

pytestmark = pytest.mark.k8s


def ftbench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftbench", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_dev_up_serves_crd_and_ready_node_and_down_stops_everything(control_plane_binaries, tmp_path: Path) -> None:
    from kubernetes import config
    from kubernetes.client import ApiextensionsV1Api, CoreV1Api

    state = tmp_path / "dev"
    # No operator and no model seeding: this test is about the cluster's lifecycle; the
    # end-to-end tests cover the operator.
    up = ftbench(
        "dev", "--state-dir", str(state), "up", "--no-operator", "--no-seed-models", "--label", "example.com/x=y"
    )
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in up.stdout
        assert "kubectl get fte -w" in up.stdout
        recorded = json.loads((state / "state.json").read_text())
        pids = [recorded["supervisor"], *recorded["components"].values()]
        assert {"kubelet", "control-plane/kube-apiserver"} <= set(recorded["components"])

        status = ftbench("dev", "--state-dir", str(state), "status")
        assert status.returncode == 0 and "kubelet" in status.stdout, status.stdout

        api = config.new_client_from_config(config_file=str(state / "kubeconfig"))
        try:
            assert ApiextensionsV1Api(api).read_custom_resource_definition("finetuneexperiments.ftbench.io")
            deadline = time.monotonic() + 30
            while True:
                node = CoreV1Api(api).read_node("ftbench-dev")
                if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                    break
                assert time.monotonic() < deadline, "node not Ready"
                time.sleep(0.5)
            assert node.metadata.labels["example.com/x"] == "y"
        finally:
            api.close()
    finally:
        down = ftbench("dev", "--state-dir", str(state), "down", timeout=90)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [p for p in pids if pid_alive(p)]
    assert ftbench("dev", "--state-dir", str(state), "status").returncode == 1
