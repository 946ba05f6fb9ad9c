"""Every rendered object validates against the real schemas, offline.

Built-in kinds: the OpenAPI schemas of current Kubernetes versions shipped by `kubernetes-validate`
(strict: unknown fields are errors, so a misspelt field cannot be silently dropped by a server).
PyTorchJob: the openAPIV3Schema of the upstream Kubeflow CRD (v1.9.2) in the shared fixtures.
TrainJob: the openAPIV3Schema of the upstream Kubeflow Trainer CRD (v2.3.0), for the render cases
and for every example rendered as a TrainJob. CEL rules (x-kubernetes-validations) are not
evaluated offline; the ones on spec fields only forbid later changes (`self == oldSelf`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.render_cases import CASE_IDS, CASES, Case, pytorchjob_crd_path, trainjob_crd_path

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev extra kubernetes-validate not installed")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed")

# 1.33: the first version with every Job field the profile can switch on (backoffLimitPerIndex GA);
# the newest schemas the package ships catch fields removed since.
KUBERNETES_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_builtin_objects_validate(case: Case, version: str) -> None:
    builtin = [o for o in case.render().objects if "kubeflow.org" not in o["apiVersion"]]
    assert builtin
    for obj in builtin:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {err}")


@cache
def crd_schema(path: Path, version_name: str) -> dict[str, Any]:
    if not path.exists():
        pytest.skip(f"CRD fixture not found at {path} (set FTBENCH_SHARED_DIR)")
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == version_name]
    return version["schema"]["openAPIV3Schema"]


def pytorchjob_schema() -> dict[str, Any]:
    return crd_schema(pytorchjob_crd_path(), "v1")


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected, as a structural-schema server prunes/rejects them."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


PYTORCH_CASES = [c for c in CASES if any(o["kind"] == "PyTorchJob" for o in c.render().objects)]


def schema_errors(schema: dict[str, Any], obj: dict[str, Any]) -> str:
    """Errors of `obj` against the closed CRD schema, one per line ('' when valid)."""
    closed = _closed(schema)
    # metadata is an open object in CRD schemas; the API server validates it, not the CRD.
    closed["properties"]["metadata"] = {"type": "object"}
    errors = sorted(jsonschema.Draft7Validator(closed).iter_errors(obj), key=lambda e: list(e.path))
    return "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


@pytest.mark.parametrize("case", PYTORCH_CASES, ids=[c.name for c in PYTORCH_CASES])
def test_pytorchjob_validates_against_upstream_crd(case: Case) -> None:
    (job,) = [o for o in case.render().objects if o["kind"] == "PyTorchJob"]
    errors = schema_errors(pytorchjob_schema(), job)
    assert not errors, errors
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


def trainjob_schema() -> dict[str, Any]:
    return crd_schema(trainjob_crd_path(), "v1alpha1")


TRAINJOB_CASES = [c for c in CASES if any(o["kind"] == "TrainJob" for o in c.render().objects)]


@pytest.mark.parametrize("case", TRAINJOB_CASES, ids=[c.name for c in TRAINJOB_CASES])
def test_trainjob_validates_against_upstream_crd(case: Case) -> None:
    jobs = [o for o in case.render().objects if o["kind"] == "TrainJob"]
    assert jobs
    for job in jobs:
        errors = schema_errors(trainjob_schema(), job)
        assert not errors, f"{job['metadata']['name']}:\n{errors}"


def test_trainjob_schema_check_catches_mistakes() -> None:
    """The closed schema rejects what the TrainJob API does not allow (so the tests above can fail)."""
    (job,) = [o for o in TRAINJOB_CASES[0].render().objects if o["kind"] == "TrainJob"]
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]["spec"]
    # Container resources are not patchable (resourcesPerNode is the way), nor is priorityClassName.
    bad_container = {**pod["containers"][0], "resources": {"limits": {"cpu": "1"}}}
    bad_pods = [{**pod, "containers": [bad_container]}, {**pod, "priorityClassName": "high"}]
    for bad_pod in bad_pods:
        bad_rjob = {
            **rjob,
            "template": {"spec": {"template": {**rjob["template"]["spec"]["template"], "spec": bad_pod}}},
        }
        bad_patch = {**patch, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [bad_rjob]}}}}
        assert schema_errors(trainjob_schema(), {**job, "spec": {**job["spec"], "runtimePatches": [bad_patch]}})
    assert schema_errors(trainjob_schema(), {**job, "spec": {**job["spec"], "trainer": {"numProcPerNode": "auto"}}})


def test_pytorchjob_schema_check_catches_mistakes() -> None:
    """The closed schema really rejects a misspelt field (so the test above can fail)."""
    (job,) = [o for o in PYTORCH_CASES[0].render().objects if o["kind"] == "PyTorchJob"]
    bad = {**job, "spec": {**job["spec"], "runPolicy": {"cleanPodPolicy": "Sometimes", "backofLimit": 0}}}
    assert schema_errors(pytorchjob_schema(), bad)


def test_builtin_schema_check_catches_mistakes() -> None:
    (job,) = [o for o in CASES[0].render().objects if o["kind"] == "Job"]
    bad = {**job, "spec": {**job["spec"], "backofLimit": 0}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)
