"""Every rendered object validates against the real schemas, offline.

Built-in kinds: the OpenAPI schemas of current Kubernetes versions shipped by `kubernetes-validate`
(strict: unknown fields are errors, so a misspelt field cannot be silently dropped by a server).
PyTorchJob: the openAPIV3Schema of the upstream Kubeflow CRD (v1.9.2) in the shared fixtures.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import yaml

from tests.unit.render_cases import CASE_IDS, CASES, Case, pytorchjob_crd_path

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev extra kubernetes-validate not installed")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed")

# 1.33: the first version with every Job field the profile can switch on (backoffLimitPerIndex GA);
# the newest schemas the package ships catch fields removed since.
KUBERNETES_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_builtin_objects_validate(case: Case, version: str) -> None:
    builtin = [o for o in case.render().objects if o["apiVersion"] != "kubeflow.org/v1"]
    assert builtin
    for obj in builtin:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {err}")


@cache
def pytorchjob_schema() -> dict[str, Any]:
    path = pytorchjob_crd_path()
    if not path.exists():
        pytest.skip(f"PyTorchJob CRD fixture not found at {path} (set FTBENCH_SHARED_DIR)")
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


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


@pytest.mark.parametrize("case", PYTORCH_CASES, ids=[c.name for c in PYTORCH_CASES])
def test_pytorchjob_validates_against_upstream_crd(case: Case) -> None:
    schema = _closed(pytorchjob_schema())
    # metadata is an open object in CRD schemas; the API server validates it, not the CRD.
    schema["properties"]["metadata"] = {"type": "object"}
    (job,) = [o for o in case.render().objects if o["kind"] == "PyTorchJob"]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(job), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


def test_pytorchjob_schema_check_catches_mistakes() -> None:
    """The closed schema really rejects a misspelt field (so the test above can fail)."""
    (job,) = [o for o in PYTORCH_CASES[0].render().objects if o["kind"] == "PyTorchJob"]
    bad = {**job, "spec": {**job["spec"], "runPolicy": {"cleanPodPolicy": "Sometimes", "backofLimit": 0}}}
    assert list(jsonschema.Draft7Validator(_closed(pytorchjob_schema())).iter_errors(bad))


def test_builtin_schema_check_catches_mistakes() -> None:
    (job,) = [o for o in CASES[0].render().objects if o["kind"] == "Job"]
    bad = {**job, "spec": {**job["spec"], "backofLimit": 0}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)
