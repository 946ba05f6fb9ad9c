"""The rendered chart installs on a real API server, and the API server's own authorizer
(SubjectAccessReview) confirms the operator's account can do its job and cannot read Secrets."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ftbench.devcluster.crds import install_crd
from tests.ship.chart import chart_crds, render

pytestmark = pytest.mark.k8s

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


@dataclass(frozen=True)
class Install:
    namespace: str
    operator_account: str
    trainer_account: str
    objects: list[dict]


def _install(kube_api, namespace: str, values: dict[str, Any]) -> Iterator[Install]:
    """CRDs first (as Helm does with crds/), then every rendered object through the Python client."""
    from kubernetes import client, utils

    for crd in chart_crds():
        install_crd(kube_api, crd)
    release = f"r{uuid.uuid4().hex[:8]}"  # cluster-scoped names must not collide across tests
    objects = render(values, namespace=namespace, release=release)
    rbac = client.RbacAuthorizationV1Api(kube_api)
    try:
        for obj in objects:
            utils.create_from_dict(kube_api, obj)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        yield Install(namespace, account, "ftbench-trainer", objects)
    finally:
        for obj in objects:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])


@pytest.fixture
def installed(kube_api, namespace: str) -> Iterator[Install]:
    yield from _install(kube_api, namespace, {})


def can(kube_api, namespace: str, account: str, verb: str, resource: str, *, group: str = "", sub: str = "") -> bool:
    """Ask the API server whether ServiceAccount `account` of `namespace` may do this in `namespace`."""
    return can_in(kube_api, namespace, account, namespace, verb, resource, group=group, sub=sub)


def can_in(
    kube_api, sa_namespace: str, account: str, namespace: str, verb: str, resource: str, *, group: str, sub: str
) -> bool:
    from kubernetes import client

    review = client.AuthorizationV1Api(kube_api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{sa_namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}", "system:authenticated"],
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": sub,
                },
            },
        }
    )
    return bool(review.status.allowed)


# (verb, resource, group, subresource): what the operator's handlers do.
OPERATOR_NEEDS = [
    *[(v, "finetuneexperiments", "ftbench.io", "") for v in ("get", "list", "watch", "patch")],
    *[(v, "finetuneexperiments", "ftbench.io", "status") for v in ("get", "patch")],
    *[(v, "jobs", "batch", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "pytorchjobs", "kubeflow.org", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "trainjobs", "trainer.kubeflow.org", "") for v in ("create", "get", "list", "watch", "delete")],
    ("list", "clustertrainingruntimes", "trainer.kubeflow.org", ""),
    *[(v, "services", "", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "configmaps", "", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "pods", "", "") for v in ("get", "list", "watch")],
    ("get", "serviceaccounts", "", ""),  # issue 12: a run whose pods' account is missing fails up front
    ("get", "priorityclasses", "scheduling.k8s.io", ""),
    ("create", "events", "", ""),
    ("patch", "events", "", ""),
]
OPERATOR_MUST_NOT = [
    *[(v, "secrets", "", "") for v in ("get", "list", "watch", "create")],
    ("create", "pods", "", ""),
    ("create", "pods", "", "exec"),
    ("get", "pods", "", "log"),
    ("delete", "finetuneexperiments", "ftbench.io", ""),
    ("create", "finetuneexperiments", "ftbench.io", ""),
    ("create", "serviceaccounts", "", "token"),
    ("create", "rolebindings", "rbac.authorization.k8s.io", ""),
    # Issue 12: least privilege. The operator never rewrites a child or a whole experiment.
    ("update", "finetuneexperiments", "ftbench.io", ""),
    ("update", "finetuneexperiments", "ftbench.io", "status"),
    *[("patch", r, g, "") for r, g in (("jobs", "batch"), ("pytorchjobs", "kubeflow.org"), ("services", ""))],
    ("patch", "configmaps", "", ""),
    ("update", "configmaps", "", ""),
    ("list", "serviceaccounts", "", ""),
    ("create", "priorityclasses", "scheduling.k8s.io", ""),
]


def test_chart_objects_are_stored(installed: Install, kube_api) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(kube_api)
    name = next(o for o in installed.objects if o["kind"] == "Deployment")["metadata"]["name"]
    stored = apps.read_namespaced_deployment(name, installed.namespace)
    assert stored.spec.replicas == 1
    assert stored.spec.strategy.type == "Recreate"
    container = stored.spec.template.spec.containers[0]
    assert container.security_context.read_only_root_filesystem is True
    assert stored.spec.template.spec.security_context.run_as_non_root is True
    core = client.CoreV1Api(kube_api)
    profile = next(o for o in installed.objects if o["kind"] == "ConfigMap")["metadata"]["name"]
    assert "profile.yaml" in core.read_namespaced_config_map(profile, installed.namespace).data


@pytest.mark.parametrize(("verb", "resource", "group", "sub"), OPERATOR_NEEDS)
def test_operator_can_do_its_job(installed: Install, kube_api, verb: str, resource: str, group: str, sub: str) -> None:
    assert can(kube_api, installed.namespace, installed.operator_account, verb, resource, group=group, sub=sub)


@pytest.mark.parametrize(("verb", "resource", "group", "sub"), OPERATOR_MUST_NOT)
def test_operator_cannot_do_more(installed: Install, kube_api, verb: str, resource: str, group: str, sub: str) -> None:
    assert not can(kube_api, installed.namespace, installed.operator_account, verb, resource, group=group, sub=sub)


def test_trainer_can_only_report_progress(installed: Install, kube_api) -> None:
    ns, sa = installed.namespace, installed.trainer_account
    assert can(kube_api, ns, sa, "patch", "finetuneexperiments", group="ftbench.io", sub="status")
    for verb, resource, group, sub in [
        ("get", "finetuneexperiments", "ftbench.io", ""),
        ("patch", "finetuneexperiments", "ftbench.io", ""),
        ("update", "finetuneexperiments", "ftbench.io", "status"),
        ("get", "secrets", "", ""),
        ("list", "pods", "", ""),
    ]:
        assert not can(kube_api, ns, sa, verb, resource, group=group, sub=sub), (verb, resource, sub)
    assert not can_in(kube_api, ns, sa, "default", "patch", "finetuneexperiments", group="ftbench.io", sub="status"), (
        "the trainer Role is namespaced"
    )


def test_namespaced_mode_grants_nothing_outside_the_watched_namespaces(kube_api, namespace: str) -> None:
    for install in _install(kube_api, namespace, {"watch": {"namespaces": [namespace]}}):
        sa = install.operator_account
        assert can(kube_api, namespace, sa, "create", "jobs", group="batch")
        assert can(kube_api, namespace, sa, "patch", "finetuneexperiments", group="ftbench.io", sub="status")
        for verb, resource, group in [("create", "jobs", "batch"), ("list", "finetuneexperiments", "ftbench.io")]:
            assert not can_in(kube_api, namespace, sa, "default", verb, resource, group=group, sub="")
        assert not can(kube_api, namespace, sa, "get", "secrets")
