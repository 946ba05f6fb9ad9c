"""`ftbench report --from-cluster` against a real API server: sweeps and their children read by label.

The objects are what the operator leaves: child FineTuneExperiments with the sweep, point and
repeat labels and their `status.results` (GpuOom children Invalid with the OOM reason), and the
FineTuneSweep's status written by `sweep_status` from `plan_sweep` over those children.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.crd import crd, sweep_crd
from ftbench.api.resource import API_VERSION, GROUP, PLURAL, SWEEP_PLURAL, VERSION
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.labels import SWEEP_LABEL, SWEEP_POINT_LABEL, SWEEP_REPEAT_LABEL
from ftbench.contracts.results import Outcome
from ftbench.kubeapi.client import call
from ftbench.kubeapi.wire import MERGE_PATCH
from ftbench.report.cluster import run_state
from ftbench.sweep.points import expand
from ftbench.sweep.schedule import OOM_REASON, plan_sweep
from ftbench.sweep.status import sweep_status
from ftbench_devcluster.crds import install_crd
from tests.local.report_cases import CPU_SWEEP, GPU_SWEEP, gpu_measure, metrics, table

pytestmark = pytest.mark.k8s
pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def crds(kube_api: Any) -> None:
    install_crd(kube_api, crd())
    install_crd(kube_api, sweep_crd())


def child(name: str, spec: dict[str, Any], labels: dict[str, str], status: dict[str, Any]) -> tuple[dict, dict]:
    body = {"apiVersion": API_VERSION, "kind": "FineTuneExperiment",
            "metadata": {"name": name, "labels": labels}, "spec": spec}  # fmt: skip
    return body, status


def predicted(percent: float) -> dict[str, Any]:
    from ftbench.api.prediction_report import MemoryFit, PredictionReport
    from ftbench.contracts.prediction import MemoryPrediction, MemorySplit

    capacity = 80 * 2**30
    total = int(capacity * percent / 100)
    split = MemorySplit(parameters_bytes=total, gradients_bytes=0, optimizer_bytes=0, activations_bytes=0)
    prediction = MemoryPrediction(peak_bytes=total, split=split, phase="backward", device="cuda", world_size=1,
                                  sharding="none", traced_parameters=1, trainable_parameters=1, seconds=1.0)  # fmt: skip
    fit = MemoryFit(gpu_model="NVIDIA-A100-SXM4-80GB", capacity_bytes=capacity, runtime_overhead_bytes=0,
                    predicted_total_bytes=total, predicted_percent=percent, fits=True, borderline=False,
                    headroom_bytes=capacity - total)  # fmt: skip
    return PredictionReport(prediction=prediction, fit=fit).model_dump(mode="json", by_alias=True, exclude_none=True)


def gpu_sweep_children(sweep: str) -> list[tuple[dict, dict]]:
    """The children the operator would have made for GPU_SWEEP, run in memory order as it runs them."""
    found = []
    for point in expand(FineTuneSweepSpec.model_validate(GPU_SWEEP), load_catalog()).points:
        assert point.spec is not None
        for repeat in range(GPU_SWEEP["repeats"]):
            result = gpu_measure(point.spec, repeat)
            if result is None:
                break
            labels = {SWEEP_LABEL: sweep, SWEEP_POINT_LABEL: str(point.index), SWEEP_REPEAT_LABEL: str(repeat)}
            if result.outcome == Outcome.GPU_OOM:
                assert result.error is not None
                status = {"phase": "Invalid", "isValid": False,
                          "invalidReason": f"{OOM_REASON}: {result.error.message}"}  # fmt: skip
            else:
                status = {"phase": "Succeeded", "isValid": True, "results": json.loads(result.to_json())["metrics"]}
                if point.index == 0:  # the operator's memory prediction, as status.prediction holds it
                    status["prediction"] = predicted(42.0)
            found.append(child(f"{sweep}-{point.index}-{repeat}", dict(point.wire), labels, status))
            if result.outcome == Outcome.GPU_OOM:
                break
    return found


def test_report_from_cluster(crds: None, kube_api: Any, control_plane: Any, namespace: str, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from kubernetes.client import CustomObjectsApi

    custom = CustomObjectsApi(kube_api)
    children = gpu_sweep_children("gpu-sweep")
    plain_spec = CPU_SWEEP["template"] | {"batchSize": 4}
    plain = child("quickstart", plain_spec, {}, {"phase": "Succeeded", "isValid": True,
                                                 "results": metrics(400.0, 0.0, 0.0, 0.3)})  # fmt: skip
    for body, status in [*children, plain]:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"],
                                                     {"status": status})  # fmt: skip
    spec = FineTuneSweepSpec.model_validate(GPU_SWEEP)
    sweep = {"apiVersion": API_VERSION, "kind": "FineTuneSweep", "metadata": {"name": "gpu-sweep"}, "spec": GPU_SWEEP}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEP_PLURAL, sweep)
    states = [run_state({"metadata": b["metadata"], "status": s}, int(b["metadata"]["labels"][SWEEP_POINT_LABEL]),
                        int(b["metadata"]["labels"][SWEEP_REPEAT_LABEL])) for b, s in children]  # fmt: skip
    plan = plan_sweep(spec, expand(spec, load_catalog()).points, states)
    status = sweep_status(plan, generation=1, previous=None, now=datetime.now(UTC), started=True)
    body = {"status": status.model_dump(by_alias=True, exclude_none=True, mode="json")}
    for row in body["status"]["points"]:  # kube-apiserver 1.20 refuses "" here ("Invalid value: null"), PATCH or PUT
        if not row["message"]:
            del row["message"]
    call(kube_api, "PATCH", f"/apis/{API_VERSION}/namespaces/{namespace}/{SWEEP_PLURAL}/gpu-sweep/status",
         body=body, content_type=MERGE_PATCH)  # fmt: skip

    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    out = tmp_path / "report"
    assert main(["report", "--from-cluster", "-n", namespace, "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert f"namespace {namespace} of https://" in md
    rows = table(md, "## Sweep gpu-sweep")
    phases = ["Succeeded"] * 2 + ["GpuOom"] + ["Skipped"] * 2 + ["Succeeded"] * 4 + ["GpuOom"]
    assert [r["phase"] for r in rows] == phases
    assert rows[0]["runs"] == "gpu-sweep-0-0, gpu-sweep-0-1" and rows[0]["step-time CV"] == "1.4%"
    assert rows[2]["note"].startswith("GpuOutOfMemory: CUDA out of memory")
    assert rows[4]["note"] == "predicted OOM from point 2 (numberGpus=1, batchSize=8)"
    predicted_column = [r["predicted GPU mem % (estimate)"] for r in rows]
    assert predicted_column[0] == "42.0" and set(predicted_column[1:]) == {""}
    assert "| quickstart | lora_benchmark-v1.0.0 | ftbench-tiny-llama |" in md
    assert all(r["predicted tokens/s (estimate)"] for r in rows if r["phase"] == "Succeeded")  # GPU points: predicted
    own = table(md, "## Runs outside sweeps")
    assert "predicted tokens/s (estimate)" not in own[0]  # the only run of its own is on CPU ranks: no prediction
    # 4 per section, 2 of gpu-sweep's scaling section (numberGpus varies), gpu-sweep's Pareto front
    assert len(list(out.glob("*.png"))) == 11 and (out / "gpu-sweep-front.png").is_file()
    assert (out / "gpu-sweep-best.yaml").is_file()  # its best point, a ready FineTuneExperiment

    assert main(["report", "--from-cluster", "-n", namespace, "--sweep", "other", "-o", str(out)]) == 2


def test_calibrate_from_cluster(crds: None, kube_api: Any, control_plane: Any, namespace: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """`ftbench calibrate --from-cluster` reads what the cluster's experiments measured: here ftbench's own H100 runs
    (bench/results) as the operator writes them into status.results."""
    import shutil

    from kubernetes.client import CustomObjectsApi

    from ftbench.api.validation import load_profile
    from ftbench.local.store import ResultsStore

    copy = tmp_path / "results.db"
    shutil.copy(Path(__file__).resolve().parents[2] / "bench/results/gpu-h100-2026-11-26/call1/trl/results.db", copy)
    custom = CustomObjectsApi(kube_api)
    runs = [r for r in ResultsStore(copy).runs() if r.status == "Succeeded" and r.results]
    for i, run in enumerate(runs):
        body, status = child(f"h100-{i}", run.spec, {}, {"phase": "Succeeded", "isValid": True,
                                                           "results": run.results[-1]["metrics"]})  # fmt: skip
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"],
                                                     {"status": status})  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    profile = tmp_path / "profile.yaml"
    assert main(["calibrate", "--from-cluster", "-n", namespace, "--profile", str(profile), "--skip-memory"]) == 0
    calibration = load_profile(profile).calibration
    assert calibration is not None
    assert sorted(r.source for r in calibration.runs) == [f"cluster:h100-{i}" for i in range(len(runs))]
    assert calibration.gpu_families["H100"].compute_efficiency is not None
