"""The generated CRD on a real kube-apiserver: installs, stores, rejects, prints, explains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from ftbench.api.resource import GROUP, PLURAL, SWEEP_KIND, SWEEP_PLURAL, VERSION

pytestmark = pytest.mark.k8s


def body(name: str, **spec: object) -> dict:
    base = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 2, "batchSize": 4, "gpuModel": "G"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "FineTuneExperiment",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


@pytest.fixture
def custom(kube_api, ftbench_crd):
    from kubernetes import client

    return client.CustomObjectsApi(kube_api)


def test_valid_experiment_is_stored_with_defaults(custom, namespace: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("ok"))
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ok")
    assert stored["spec"]["gradientAccumulationSteps"] == 4  # server-side default from the schema
    assert stored["spec"]["fmsHfTuningVersion"] == "2.1.2"
    assert "torchDtype" not in stored["spec"]  # experiment-dependent: no static default


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"batchSize": 0}, "spec.batchSize"),
        ({"optim": "adam"}, "spec.optim"),
        ({"numberNodes": 0}, "spec.numberNodes"),
        ({"datasetId": "wikipedia"}, "spec.datasetId"),
        ({"fastKernels": [True]}, "spec.fastKernels"),
        # Issue 12: free text that reaches a command line or a label, and absurd values.
        ({"targetModules": ["q_proj", "--max_steps", "999999"]}, "spec.targetModules"),
        ({"targetModules": ["q_proj"] * 65}, "spec.targetModules"),
        ({"targetModules": ["x" * 129]}, "spec.targetModules"),
        ({"datasetTextField": "--output_dir"}, "spec.datasetTextField"),
        ({"datasetImageField": "a b"}, "spec.datasetImageField"),
        ({"gpuModel": "NVIDIA A100/80GB"}, "spec.gpuModel"),
        ({"gpuModel": "G" * 64}, "spec.gpuModel"),
        ({"model": "-x"}, "spec.model"),
        ({"batchSize": 10**9}, "spec.batchSize"),
        ({"numberGpus": 4096, "batchSize": 4096}, "spec.numberGpus"),
        ({"numTrainEpochs": 1e300}, "spec.numTrainEpochs"),
        ({"stopAfterSeconds": -5}, "spec.stopAfterSeconds"),
        ({"maxSteps": 10**9}, "spec.maxSteps"),
    ],
)
def test_schema_violations_are_rejected_with_the_field(custom, namespace: str, spec: dict, expected: str) -> None:
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("bad", **spec))
    assert info.value.status == 422
    message = json.loads(info.value.body)["message"]
    assert expected in message, message


def test_missing_required_field_is_rejected(custom, namespace: str) -> None:
    from kubernetes.client.rest import ApiException

    doc = body("bad")
    del doc["spec"]["model"]
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    assert "spec.model: Required value" in json.loads(info.value.body)["message"]


def test_status_subresource_keeps_declared_fields(custom, namespace: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("st"))
    status = {
        "phase": "Succeeded",
        "isValid": True,
        "results": {
            "trainRuntimeSeconds": 10.0,
            "trainSteps": 5,
            "trainSamples": 20,
            "trainTokens": 4000,
            "trainNonPaddingTokens": 3000,
            "trainSamplesPerSecond": 2.0,
            "trainStepsPerSecond": 0.5,
            "trainTokensPerSecond": 400.0,
            "trainTokensPerGpuPerSecond": 200.0,
            "datasetTokensPerSecond": 300.0,
            "datasetTokensPerSecondPerGpu": 150.0,
            "gpuMemoryUtilizationPeakPercent": 71.5,
        },
    }
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "st", {"status": status})
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "st")
    assert stored["status"]["results"]["trainTokensPerSecond"] == 400.0
    assert stored["status"]["results"]["gpuMemoryUtilizationPeakPercent"] == 71.5


def test_printer_columns_in_table_request(custom, control_plane, namespace: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("tbl"))
    response = control_plane.request(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    names = [c["name"] for c in response["columnDefinitions"]]
    for column in ("Phase", "Experiment", "Model", "GPUs", "Batch", "Tokens/s", "PeakMem%", "Valid", "Age"):
        assert column in names
    row = dict(zip(names, response["rows"][0]["cells"], strict=True))
    assert row["Model"] is None and row["Batch"] is None  # nothing accepted yet: nothing shown as run


def test_printer_columns_show_the_accepted_spec_not_a_later_edit(custom, control_plane, namespace: str) -> None:
    """Issue 27.3: an edit an old server stores (and the operator ignores) must not change the columns."""
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("acc"))
    accepted = {**body("acc")["spec"], "experiment": "finetune_full_benchmark-v1.0.0", "engine": "fms-hf-tuning"}
    results = {"trainTokensPerSecond": 400.0, "trainRuntimeSeconds": 1.0, "trainSteps": 1, "trainSamples": 4,
               "trainTokens": 400, "trainNonPaddingTokens": 400, "trainSamplesPerSecond": 4.0,
               "trainStepsPerSecond": 1.0, "trainTokensPerGpuPerSecond": 200.0, "datasetTokensPerSecond": 400.0,
               "datasetTokensPerSecondPerGpu": 200.0}  # fmt: skip
    status = {"phase": "Succeeded", "acceptedSpec": accepted, "results": results}
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "acc", {"status": status})
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "acc", {"spec": {"batchSize": 8}})
    response = control_plane.request(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/acc",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    names = [c["name"] for c in response["columnDefinitions"]]
    row = dict(zip(names, response["rows"][0]["cells"], strict=True))
    assert row["Batch"] == 4 and row["Model"] == "llama3.1-8b" and row["GPUs"] == 2 and row["Tokens/s"] == 400.0


def _explained(env: dict[str, str], path: str, expected: str) -> str:
    """`kubectl explain path`, asked until it prints `expected`: the OpenAPI aggregator publishes a
    new CRD's schema after a few seconds."""
    out = ""
    for _ in range(30):
        proc = subprocess.run(["kubectl", "explain", path], capture_output=True, text=True, env=env)
        out = proc.stdout + proc.stderr
        if proc.returncode == 0 and expected in out:
            break
        time.sleep(1)
    return out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_explain_prints_field_docs(control_plane, ftbench_crd) -> None:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    out = _explained(env, "fte.spec.batchSize", "evenly distributed")
    assert "evenly distributed over max(1, numberGpus)" in out, out
    assert "per_device_train_batch_size" in out and "global batch" in out, out  # ado's meaning, made explicit
    for path in ("fte.spec", "fte.spec.run", "fte.status", "fte.status.batch"):
        proc = subprocess.run(["kubectl", "explain", path], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "<>" not in proc.stdout, f"{path}: a field without a type:\n{proc.stdout}"  # nullable fields did that
    batch = subprocess.run(["kubectl", "explain", "fte.status.batch.globalBatchSize"], capture_output=True, text=True,
                           env=env).stdout  # fmt: skip
    assert "<integer>" in batch and "gradientAccumulationSteps" in batch, batch


def sweep_body(name: str, **spec: object) -> dict:
    template = {
        "model": "llama3.1-8b",
        "numberGpus": 1,
        "gpuModel": "G",
        "experiment": "finetune_lora_benchmark-v1.0.0",
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": SWEEP_KIND,
        "metadata": {"name": name},
        "spec": {"template": template, "matrix": {"batchSize": [2, 4], "targetModules": [["q_proj"], ["v_proj"]]},
                 **spec},
    }  # fmt: skip


def test_sweep_is_stored_with_defaults_and_its_template_and_matrix_kept(kube_api, sweep_crd, namespace) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEP_PLURAL, sweep_body("s"))
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SWEEP_PLURAL, "s")
    assert stored["spec"]["repeats"] == 1 and stored["spec"]["oomPruning"] is True  # server-side defaults
    assert stored["spec"]["matrix"] == {"batchSize": [2, 4], "targetModules": [["q_proj"], ["v_proj"]]}
    assert stored["spec"]["template"]["model"] == "llama3.1-8b"
    assert "gradientAccumulationSteps" not in stored["spec"]["template"]  # no defaults in a template
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEP_PLURAL, sweep_body("r", repeats=0))
    assert refused.value.status == 422 and "spec.repeats" in refused.value.body


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_explain_prints_sweep_docs(control_plane, sweep_crd) -> None:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    out = _explained(env, "fts.spec.matrix", "Cartesian product")
    assert "Cartesian product" in out, out
