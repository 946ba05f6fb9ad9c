"""The rendered objects are accepted by a real API server (server-side `dryRun=All`).

The test control plane is Kubernetes 1.20: it validates Pod templates, resources, volumes, env
and security contexts, but silently drops fields it does not know (`completionMode`,
`podFailurePolicy`, `suspend`, ...). Those are covered offline against current schemas
(tests/unit/test_render_schema.py); here we check everything 1.20 stores, and that what it
stored is what we sent. The PyTorchJob and the TrainJob are created after installing their
upstream CRDs (Kubeflow Trainer v1.9.2 and v2.3.0).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from ftbench_devcluster.crds import install_crd, without_empty_string_defaults
from tests.unit.render_cases import CASE_IDS, CASES, Case, pytorchjob_crd_path, trainjob_crd_path

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

pytestmark = pytest.mark.k8s


def _create(api: ApiClient, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    from kubernetes import client

    body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    kind = obj["kind"]
    if kind == "ConfigMap":
        created = client.CoreV1Api(api).create_namespaced_config_map(namespace, body, dry_run="All")
    elif kind == "Service":
        created = client.CoreV1Api(api).create_namespaced_service(namespace, body, dry_run="All")
    elif kind == "ServiceAccount":
        created = client.CoreV1Api(api).create_namespaced_service_account(namespace, body, dry_run="All")
    elif kind == "Role":
        created = client.RbacAuthorizationV1Api(api).create_namespaced_role(namespace, body, dry_run="All")
    elif kind == "RoleBinding":
        subjects = [{**s, "namespace": namespace} for s in body["subjects"]]
        rbac = client.RbacAuthorizationV1Api(api)
        created = rbac.create_namespaced_role_binding(namespace, {**body, "subjects": subjects}, dry_run="All")
    elif kind == "Job":
        created = client.BatchV1Api(api).create_namespaced_job(namespace, body, dry_run="All")
    elif kind == "PyTorchJob":
        return client.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", body, dry_run="All"
        )
    elif kind == "TrainJob":
        return client.CustomObjectsApi(api).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", body, dry_run="All"
        )
    else:
        raise AssertionError(f"unexpected kind {kind}")
    return api.sanitize_for_serialization(created)


@pytest.fixture(scope="module")
def pytorchjob_crd(kube_api: ApiClient) -> None:
    """Install the upstream PyTorchJob CRD once (create, not apply: it is ~600 KB)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    path = pytorchjob_crd_path()
    if not path.exists():
        pytest.skip(f"PyTorchJob CRD fixture not found at {path} (set FTBENCH_SHARED_DIR)")
    ext = client.ApiextensionsV1Api(kube_api)
    crd = yaml.safe_load(path.read_text())
    try:
        ext.create_custom_resource_definition(crd, _preload_content=False)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = ext.read_custom_resource_definition(crd["metadata"]["name"], _preload_content=False)
        conditions = (yaml.safe_load(status.data).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.3)
    pytest.fail("PyTorchJob CRD not Established after 30s")


@pytest.fixture(scope="module")
def trainjob_crd(kube_api: ApiClient) -> None:
    """Install the upstream TrainJob CRD once (1.20 needs its empty-string defaults dropped)."""
    path = trainjob_crd_path()
    if not path.exists():
        pytest.skip(f"TrainJob CRD fixture not found at {path} (set FTBENCH_SHARED_DIR)")
    install_crd(kube_api, without_empty_string_defaults(yaml.safe_load(path.read_text())))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_rendered_objects_pass_server_dry_run(case: Case, kube_api: ApiClient, namespace: str, request) -> None:
    objects = case.render().objects
    if any(o["kind"] == "PyTorchJob" for o in objects):
        request.getfixturevalue("pytorchjob_crd")
    if any(o["kind"] == "TrainJob" for o in objects):
        request.getfixturevalue("trainjob_crd")
    for obj in objects:
        stored = _create(kube_api, obj, namespace)
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
        if obj["kind"] == "Job":
            _assert_pod_template_kept(obj["spec"]["template"], stored["spec"]["template"])
        elif obj["kind"] == "PyTorchJob":
            for role, replica in obj["spec"]["pytorchReplicaSpecs"].items():
                stored_replica = stored["spec"]["pytorchReplicaSpecs"][role]
                assert stored_replica["replicas"] == replica["replicas"]
                _assert_pod_template_kept(replica["template"], stored_replica["template"])
        elif obj["kind"] == "TrainJob":
            # The CRD's structural schema prunes unknown fields: what we sent must survive whole
            # (next to the server's defaults, e.g. managedBy).
            assert {k: v for k, v in stored["spec"].items() if k in obj["spec"]} == obj["spec"]
        elif obj["kind"] == "ConfigMap":
            assert stored["data"] == obj["data"]


def _assert_pod_template_kept(sent: dict[str, Any], stored: dict[str, Any]) -> None:
    """The fields 1.20 knows survive: env, resources, mounts, security, scheduling."""
    (sent_c,), (stored_c,) = sent["spec"]["containers"], stored["spec"]["containers"]
    assert [e["name"] for e in stored_c["env"]] == [e["name"] for e in sent_c["env"]]
    assert stored_c["resources"] == sent_c["resources"]
    assert [m["mountPath"] for m in stored_c["volumeMounts"]] == [m["mountPath"] for m in sent_c["volumeMounts"]]
    assert stored_c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert stored_c["securityContext"]["allowPrivilegeEscalation"] is False
    assert stored["spec"].get("nodeSelector") == sent["spec"].get("nodeSelector")
    assert stored["spec"]["securityContext"]["runAsNonRoot"] == sent["spec"]["securityContext"]["runAsNonRoot"]
    assert stored["spec"].get("subdomain") == sent["spec"].get("subdomain")
