"""spec.run.oomPrecheck on the test control plane: the real operator asks the real predictor service.

The predictor (`python -m ftbench_trainer.predict.serve`, what the chart's predictor Deployment
runs) traces a 7B Llama from its config.json alone, which the profile's model map points at, as a
models volume would hold it. Full fine-tuning 7B in float16 is about 63 GB at the optimizer step:
it fits an 80 GB A100 and not a 40 GB one, so the same spec shows every verdict by its gpuModel.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from operator_testkit import TEST_PROFILE, Kubelet, wait_for

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench.contracts.prediction import HEALTH_PATH
from ftbench_devcluster import ControlPlane
from ftbench_devcluster.crds import install_crd

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
NS = "bench"


@pytest.fixture
def predictor_url(tmp_path: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "trainer-image")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    log = (tmp_path / "predictor.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftbench_trainer.predict.serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool | None:
        try:
            return urllib.request.urlopen(url + HEALTH_PATH, timeout=1).status == 200 or None
        except OSError:
            return None

    try:
        wait_for(healthy, 60, what="predictor healthy")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def seven_b_config(path: Path) -> Path:
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=32000,
        max_position_embeddings=4096, architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)  # fmt: skip
    return path


def full_7b(gpu: str, precheck: str | None = None) -> dict[str, Any]:
    return {
        "experiment": "finetune_full_benchmark-v1.0.0", "engine": "trl", "model": "llama-7b", "modelMaxLength": 1024,
        "numberGpus": 1, "gpuModel": gpu, "batchSize": 1, "torchDtype": "float16",
        **({"run": {"oomPrecheck": precheck}} if precheck else {}),
    }  # fmt: skip


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def test_predicted_memory_is_recorded_and_a_predicted_oom_refused_before_anything_is_created(
    own_cluster: ControlPlane, tmp_path: Path, operator_process: Any, predictor_url: str
) -> None:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom, batch = CoreV1Api(api), CustomObjectsApi(api), BatchV1Api(api)
    install_crd(api, crd())
    core.create_namespace({"metadata": {"name": NS}})
    wait_for(lambda: core.read_namespaced_service_account("default", NS).secrets, 30, what="SA token")
    from ftbench_trainer.tiny_model import build_tiny_model

    # llama3.2-1b: a folder with a tokenizer (the tiny model's), so the predictor counts the rows that train
    tokenizer_model = str(build_tiny_model(tmp_path / "with-tokenizer"))
    profile = {**TEST_PROFILE, "modelMap": {"llama-7b": str(seven_b_config(tmp_path / "llama-7b")),
                                            "allam-1-13b": str(tmp_path / "no-such-model"),
                                            "llama3.2-1b": tokenizer_model},
               # what `ftbench calibrate` writes: the operator's predictions use it and name it
               "calibration": {"name": "rig", "fittedAt": "2026-11-28T00:00:00Z",
                               "gpuFamilies": {"A100": {"runs": 3, "computeEfficiency": 0.9}}}}  # fmt: skip
    operator = operator_process(
        own_cluster.kubeconfig, tmp_path, profile, env={"FTBENCH_OPERATOR_PREDICTOR_URL": predictor_url}
    ).start()
    kubelet = Kubelet(api, NS)

    def create(name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    try:
        create("fits", full_7b("NVIDIA-A100-SXM4-80GB"))
        create("refused", full_7b("NVIDIA-A100-SXM4-40GB", "refuse"))
        create("warned", full_7b("NVIDIA-A100-SXM4-40GB"))
        # No config.json at its path and no architecture in the catalog: nothing to trace.
        create("unknown", {**full_7b("NVIDIA-A100-SXM4-80GB"), "model": "allam-1-13b"})
        create("off", full_7b("NVIDIA-A100-SXM4-40GB", "off"))
        # Issue 45.2: prompts of 218 tokens or more under its tokenizer; at modelMaxLength 200 none trains.
        create("no-rows", {**full_7b("NVIDIA-A100-SXM4-80GB"), "model": "llama3.2-1b", "modelMaxLength": 200,
                           "torchDtype": "bfloat16"})  # fmt: skip

        fits = kubelet.wait_phase("fits", "Pending")
        prediction = fits["status"]["prediction"]
        assert prediction["prediction"]["tracedParameters"] == 6_738_415_616
        assert prediction["prediction"]["phase"] == "optimizer" and prediction["fit"]["fits"] is True
        assert 75 < prediction["fit"]["predictedPercent"] < 90
        # How sure: ado's fleet's out-of-sample band; engine trl and llama-7b are not the fleet's, so it says so.
        accuracy = prediction["fit"]["fleetAccuracy"]
        assert (accuracy["group"], accuracy["validation"]) == ("one GPU", "leave one model out, widened")
        assert any(line.startswith("engine trl") for line in accuracy["outsideCalibration"])
        assert prediction["throughput"]["accuracy"]["validation"] == "leave one model out, widened"
        assert prediction["calibration"]["name"] == "rig"
        assert prediction["calibration"]["applied"] == ["A100: compute efficiency x0.900 (3 runs)"]
        assert condition(fits, "MemoryFits")["reason"] in ("PredictedToFit", "PredictedBorderline")

        refused = kubelet.wait_phase("refused", "Invalid")
        assert refused["status"]["invalidReason"].startswith("predicted ")
        assert "does not fit (predicted OOM)" in refused["status"]["message"]
        assert refused["status"]["prediction"]["fit"]["fits"] is False
        assert condition(refused, "MemoryFits")["reason"] == "PredictedOOM"
        assert condition(refused, "Valid")["reason"] == "PredictedOOM"

        warned = kubelet.wait_phase("warned", "Pending")
        assert condition(warned, "MemoryFits")["status"] == "False"
        wait_for(lambda: [e for e in core.list_namespaced_event(NS, field_selector="involvedObject.name=warned").items
                          if e.reason == "PredictedOOM" and e.type == "Warning"] or None,
                 30, what="PredictedOOM warning")  # fmt: skip

        unknown = kubelet.wait_phase("unknown", "Pending")
        cond = condition(unknown, "MemoryFits")
        assert cond["status"] == "Unknown" and cond["reason"] == "PredictorUnavailable"
        assert "cannot read the config of model allam-1-13b" in cond["message"]
        assert "prediction" not in unknown["status"]

        off = kubelet.wait_phase("off", "Pending")
        assert "prediction" not in off["status"]
        assert all(c["type"] != "MemoryFits" for c in off["status"]["conditions"])

        no_rows = kubelet.wait_phase("no-rows", "Invalid")
        assert condition(no_rows, "Valid")["reason"] == "TooFewTrainedRows", no_rows["status"]
        assert "spec.modelMaxLength: 0 of the 4096 entries" in no_rows["status"]["message"]
        assert "use modelMaxLength" in no_rows["status"]["message"]
        assert no_rows["status"]["prediction"]["rowsTrained"] == 0
        assert fits["status"]["prediction"].get("rowsTrained") is None  # no tokenizer beside llama-7b's config

        jobs = {j.metadata.labels.get("ftbench.io/experiment") for j in batch.list_namespaced_job(NS).items}
        assert not {"refused", "no-rows"} & jobs and {"fits", "warned", "unknown", "off"} <= jobs
    finally:
        operator.stop()
