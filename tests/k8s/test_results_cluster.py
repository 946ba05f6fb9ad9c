"""`ftbench results --export ... --from-cluster` against a real API server: what the cluster measured,
in the same columns as local runs, with ado's names when asked."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, PLURAL, VERSION
from ftbench.cli import main
from ftbench_devcluster.control_plane import ControlPlane
from ftbench_devcluster.crds import install_crd
from tests.local.report_cases import metrics

pytestmark = pytest.mark.k8s

SPEC = {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama", "numberGpus": 0,
        "batchSize": 2, "modelMaxLength": 256}  # fmt: skip


@pytest.fixture
def quiet_cluster(control_plane_binaries: Any) -> Iterator[tuple[ControlPlane, Any]]:
    """A control plane of this test's own, with the CRD and no operator: the test writes the status an
    operator would have written, and the session's operator (which a worker that ran the operator tests
    keeps, watching every namespace) would answer a new experiment with its own status."""
    from kubernetes import config

    with ControlPlane(binaries=control_plane_binaries) as cp:
        client = config.new_client_from_config(config_file=str(cp.kubeconfig))
        try:
            install_crd(client, crd())
            yield cp, client
        finally:
            client.close()


def test_results_export_from_cluster(quiet_cluster: tuple[ControlPlane, Any], monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from kubernetes.client import CoreV1Api, CustomObjectsApi

    control_plane, kube_api = quiet_cluster
    namespace = "results"
    CoreV1Api(kube_api).create_namespace({"metadata": {"name": namespace}})
    custom = CustomObjectsApi(kube_api)
    measured = {"phase": "Succeeded", "isValid": True, "results": metrics(400.0, 0.0, 0.0, 0.3),
                "environment": {"engine": "trl", "engineVersion": "0.24.0"}}  # fmt: skip
    failed = {"phase": "Failed", "message": "evicted"}
    for name, engine, status in (("trl-run", "trl", measured), ("fms-run", "fms-hf-tuning", failed)):
        body = {"apiVersion": API_VERSION, "kind": "FineTuneExperiment", "metadata": {"name": name},
                "spec": SPEC | {"engine": engine}}  # fmt: skip
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))

    assert main(["results", "--export", "csv", "--names", "ado", "--from-cluster", "-n", namespace]) == 0
    rows = {r["ftbench_run_id"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    uids = {o["metadata"]["name"]: o["metadata"]["uid"]
            for o in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]}  # fmt: skip
    trl, fms = rows[uids["trl-run"]], rows[uids["fms-run"]]
    assert (trl["ftbench_status"], trl["ftbench_engine"], trl["ftbench_engine_version"]) == (
        "Succeeded",
        "trl",
        "0.24.0",
    )
    assert trl["fms_hf_tuning_version"] == "" and float(trl["train_tokens_per_second"]) == 400.0
    assert trl["is_valid"] == "True" and trl["experiment_id"] == "finetune_lora_benchmark-v1.0.0"
    assert (fms["ftbench_status"], fms["train_tokens_per_second"], fms["is_valid"]) == ("Failed", "", "")
    assert fms["fms_hf_tuning_version"] != ""  # the release the spec asked for (the run never started)

    assert main(["results", "--from-cluster", "-n", namespace]) == 0  # the table, too
    table = capsys.readouterr().out
    assert "trl-run" in table and "fms-run" in table and "Failed" in table
    assert main(["results", "--namespace", namespace]) == 2  # a namespace only means something on a cluster


def test_results_from_cluster_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["results", "--export", "csv", "--from-cluster"]) == 2
    assert "cannot read the cluster" in capsys.readouterr().err
