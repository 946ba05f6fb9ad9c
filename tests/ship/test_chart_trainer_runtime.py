"""The chart's opt-in ClusterTrainingRuntime (`kubeflowTrainer.runtime.enabled`) is what Kubeflow
Trainer v2.3.0 accepts and what ftbench's TrainJobs patch: checked against the upstream CRD fixture
offline, created on the real API server with that CRD installed, and referenced by the TrainJob
ftbench renders from the chart's own cluster profile."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.render.manifests import render_experiment
from ftbench.render.pods import TRAINER_COMMAND
from ftbench.render.trainjob import NODE_CONTAINER, TRAINER_GROUP
from tests.ship.chart import TRAINER_RUNTIME_VALUES, by_kind, one, render
from tests.unit.render_cases import ROCE_2NODE_70B, trainer_v2_dir

RUNTIME_CRD = "trainer.kubeflow.org_clustertrainingruntimes.yaml"


def runtime_schema() -> dict:
    from tests.unit.test_render_schema import crd_schema

    return crd_schema(trainer_v2_dir() / RUNTIME_CRD, "v1alpha1")


def _profile(objects: list[dict]) -> ClusterProfile:
    (config_map,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("cluster-profile")]
    return ClusterProfile.model_validate(yaml.safe_load(config_map["data"]["profile.yaml"]) or {})


def test_off_by_default() -> None:
    objects = render()
    assert not by_kind(objects, "ClusterTrainingRuntime")
    assert _profile(objects).train_job.runtime_name == "torch-distributed"


def test_the_runtime_validates_against_trainers_crd() -> None:
    from tests.unit.test_render_schema import schema_errors

    runtime = one(render(TRAINER_RUNTIME_VALUES), "ClusterTrainingRuntime")
    assert runtime["apiVersion"] == f"{TRAINER_GROUP}/v1alpha1"
    errors = schema_errors(runtime_schema(), runtime)
    assert not errors, errors
    # The same shape as upstream's torch-distributed runtime where ftbench relies on it.
    upstream = yaml.safe_load((trainer_v2_dir() / "torch_distributed.yaml").read_text())
    assert runtime["spec"]["mlPolicy"] == upstream["spec"]["mlPolicy"]
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (upstream_job,) = upstream["spec"]["template"]["spec"]["replicatedJobs"]
    assert job["template"]["metadata"]["labels"] == upstream_job["template"]["metadata"]["labels"]
    pod = job["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == list(TRAINER_COMMAND) and container["image"] == "ghcr.io/ftbench/trainer:0.1.0"
    assert job["template"]["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    "values",
    [
        TRAINER_RUNTIME_VALUES,
        {**TRAINER_RUNTIME_VALUES, "clusterProfile": {"trainJob": {"replicatedJob": "trainer", "runtimeName": "mine"}}},
    ],
    ids=["defaults", "profile-names-its-own"],
)
def test_ftbench_trainjobs_reference_and_patch_it(values: dict) -> None:
    """The chart's profile points TrainJobs at the shipped runtime (unless it names another), and the
    runtime patch of a rendered TrainJob targets the runtime's replicated job and container."""
    objects = render(values)
    runtime = one(objects, "ClusterTrainingRuntime")
    profile = _profile(objects)
    own = values.get("clusterProfile", {}).get("trainJob", {}).get("runtimeName")
    assert profile.train_job.runtime_name == (own or runtime["metadata"]["name"])
    spec = FineTuneExperimentSpec.model_validate({**ROCE_2NODE_70B, "run": {"runtime": "TrainJob"}})
    rendered = render_experiment(spec, load_catalog(), profile, name="x", namespace="bench", uid="", attempt=0)
    (train_job,) = by_kind(rendered.objects, "TrainJob")
    assert train_job["spec"]["runtimeRef"]["name"] == profile.train_job.runtime_name
    (patch,) = train_job["spec"]["runtimePatches"]
    (patched,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert patched["name"] == job["name"] == profile.train_job.replicated_job
    (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
    (patched_container,) = patched["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == patched_container["name"] == NODE_CONTAINER


def _missing(stored: object, written: object, path: str = "spec") -> list[str]:
    """Where `stored` lacks or changed what was `written` (the server's added defaults are fine)."""
    if isinstance(written, dict) and isinstance(stored, dict):
        return [m for k, v in written.items() for m in _missing(stored.get(k), v, f"{path}.{k}")]
    if isinstance(written, list) and isinstance(stored, list) and len(written) == len(stored):
        return [m for i, (a, b) in enumerate(zip(stored, written, strict=True)) for m in _missing(a, b, f"{path}[{i}]")]
    return [] if stored == written else [f"{path}: wrote {written!r}, stored {stored!r}"]


@pytest.mark.k8s
def test_the_api_server_accepts_it_unpruned(kube_api) -> None:
    """Created on the test control plane with Trainer's CRD installed: stored as written (plus the
    schema's defaults), so no field was dropped by the structural schema (the 1.20 server drops the CRD's CEL rules, and refuses its
    empty-string defaults, which `without_empty_string_defaults` removes as for the TrainJob tests)."""
    from kubernetes import client

    from ftbench_devcluster.crds import install_crd, without_empty_string_defaults

    crd_path: Path = trainer_v2_dir() / RUNTIME_CRD
    if not crd_path.exists():
        pytest.skip(f"CRD fixture not found at {crd_path} (set FTBENCH_SHARED_DIR)")
    install_crd(kube_api, without_empty_string_defaults(yaml.safe_load(crd_path.read_text())))
    runtime = one(render(TRAINER_RUNTIME_VALUES, release="rt-test"), "ClusterTrainingRuntime")
    api = client.CustomObjectsApi(kube_api)
    args = (TRAINER_GROUP, "v1alpha1", "clustertrainingruntimes")
    try:
        api.delete_cluster_custom_object(*args, runtime["metadata"]["name"])
    except client.ApiException as err:
        if err.status != 404:
            raise
    created = api.create_cluster_custom_object(*args, runtime)
    try:
        assert not _missing(created["spec"], runtime["spec"]), _missing(created["spec"], runtime["spec"])
    finally:
        api.delete_cluster_custom_object(*args, runtime["metadata"]["name"])


PREDICTOR_VALUES = {
    "predictor": {
        "enabled": True,
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "hf-models-pvc", "readOnly": True}}],
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
    }
}


def test_the_predictor_is_off_by_default_and_the_operator_is_told_where_it_is_when_on() -> None:
    objects = render()
    assert not [o for o in by_kind(objects, "Deployment") if o["metadata"]["name"].endswith("-predictor")]
    operator_env = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "FTBENCH_OPERATOR_PREDICTOR_URL" not in {e["name"] for e in operator_env}

    objects = render(PREDICTOR_VALUES)
    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    predictor = next(d for name, d in deployments.items() if name.endswith("-predictor"))
    operator = next(d for name, d in deployments.items() if not name.endswith("-predictor"))
    (service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-predictor")]
    pod = predictor["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "ftbench_trainer.predict.serve"]
    assert container["image"] == "ghcr.io/ftbench/trainer:0.1.0"
    assert container["volumeMounts"] == PREDICTOR_VALUES["predictor"]["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False
    # The Service selects the predictor's pods and not the operator's.
    assert service["spec"]["selector"].items() <= predictor["spec"]["template"]["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= operator["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    url = env["FTBENCH_OPERATOR_PREDICTOR_URL"]
    assert url.startswith(f"http://{service['metadata']['name']}.") and url.endswith(":8470")
