"""The rendered chart installs on a real API server, and the API server's own authorizer
(SubjectAccessReview) confirms the operator's account can do its job and cannot read Secrets.

The per-experiment trainer identity (`ftbench.render.access`) is created here *as the operator*
(impersonating its ServiceAccount), so the API server's RBAC escalation check proves the operator
may grant it, and may not grant more."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ftbench_devcluster.crds import install_crd
from tests.ship.chart import chart_crds, render

pytestmark = pytest.mark.k8s
RBAC_GROUP = "rbac.authorization.k8s.io"

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


@dataclass(frozen=True)
class Install:
    namespace: str
    operator_account: str
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
        yield Install(namespace, account, objects)
    finally:
        for obj in objects:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])


@pytest.fixture
def installed(kube_api, namespace: str) -> Iterator[Install]:
    yield from _install(kube_api, namespace, {})


def can(
    kube_api, namespace: str, account: str, verb: str, resource: str, *, group: str = "", sub: str = "", name: str = ""
) -> bool:
    """Ask the API server whether ServiceAccount `account` of `namespace` may do this in `namespace`."""
    return can_in(kube_api, namespace, account, namespace, verb, resource, group=group, sub=sub, name=name)


def can_in(
    kube_api,
    sa_namespace: str,
    account: str,
    namespace: str,
    verb: str,
    resource: str,
    *,
    group: str,
    sub: str,
    name: str = "",
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
                    "name": name,
                },
            },
        }
    )
    return bool(review.status.allowed)


TRAINER_IDENTITY = [("serviceaccounts", ""), ("roles", RBAC_GROUP), ("rolebindings", RBAC_GROUP)]
# (verb, resource, group, subresource): what the operator's handlers do.
OPERATOR_NEEDS = [
    *[(v, "finetuneexperiments", "ftbench.io", "") for v in ("get", "list", "watch", "patch")],
    # Issue 15: the sweep controller reads sweeps, writes their status and creates their children.
    ("create", "finetuneexperiments", "ftbench.io", ""),
    *[(v, "finetunesweeps", "ftbench.io", "") for v in ("get", "list", "watch")],
    *[(v, "finetunesweeps", "ftbench.io", "status") for v in ("get", "patch")],
    ("update", "finetunesweeps", "ftbench.io", "finalizers"),
    *[(v, "finetuneexperiments", "ftbench.io", "status") for v in ("get", "patch")],
    *[(v, "jobs", "batch", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "pytorchjobs", "kubeflow.org", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "trainjobs", "trainer.kubeflow.org", "") for v in ("create", "get", "list", "watch", "delete")],
    ("list", "clustertrainingruntimes", "trainer.kubeflow.org", ""),
    *[(v, "services", "", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "configmaps", "", "") for v in ("create", "get", "list", "watch", "delete")],
    *[(v, "pods", "", "") for v in ("get", "list", "watch")],
    ("get", "serviceaccounts", "", ""),  # issue 12: a run whose pods' account is missing fails up front
    # Issue 12: each experiment's own trainer account, Role and RoleBinding (ftbench.render.access).
    *[(v, r, g, "") for v in ("create", "get") for r, g in TRAINER_IDENTITY],
    ("list", "events", "", ""),  # why the Job controller could not create a pod (FailedCreate)
    ("get", "priorityclasses", "scheduling.k8s.io", ""),
    ("create", "events", "", ""),
    ("patch", "events", "", ""),
]
OPERATOR_MUST_NOT = [
    *[(v, "secrets", "", "") for v in ("get", "list", "watch", "create")],
    *[("create", "pods", "", sub) for sub in ("", "exec")],
    ("get", "pods", "", "log"),
    ("delete", "finetuneexperiments", "ftbench.io", ""),
    ("create", "serviceaccounts", "", "token"),
    # Issue 15: a sweep is the user's record; the operator writes only its status.
    *[(v, "finetunesweeps", "ftbench.io", "") for v in ("create", "update", "patch", "delete")],
    ("update", "finetunesweeps", "ftbench.io", "status"),
    # The trainer identity is created once and garbage-collected: never changed or deleted by hand.
    *[(v, r, g, "") for v in ("update", "patch", "delete", "list") for r, g in TRAINER_IDENTITY],
    ("bind", "clusterroles", RBAC_GROUP, ""),
    ("escalate", "roles", RBAC_GROUP, ""),
    ("create", "clusterrolebindings", RBAC_GROUP, ""),
    # Issue 12: least privilege. The operator never rewrites a child or a whole experiment.
    *[("update", "finetuneexperiments", "ftbench.io", sub) for sub in ("", "status")],
    *[("patch", r, g, "") for r, g in (("jobs", "batch"), ("pytorchjobs", "kubeflow.org"), ("services", ""))],
    *[(v, "configmaps", "", "") for v in ("patch", "update")],
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


def impersonating(kube_api, namespace: str, account: str):
    """An API client that acts as ServiceAccount `account` (the admin's client may impersonate)."""
    from kubernetes import client

    api = client.ApiClient(kube_api.configuration)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{account}")
    api.set_default_header("Impersonate-Group", "system:serviceaccounts")
    return api


def trainer_identity(namespace: str, experiment: str) -> list[dict]:
    """What the operator creates for `experiment` with the default profile."""
    from ftbench.api.profile import ClusterProfile
    from ftbench.render.access import trainer_access

    return trainer_access(ClusterProfile(), experiment, namespace, {"ftbench.io/experiment": experiment}, roce=False)


def create_as(api, objects: list[dict]) -> None:
    from kubernetes import utils

    for obj in objects:
        utils.create_from_dict(api, obj)


def test_trainer_of_one_experiment_cannot_touch_another(installed: Install, kube_api) -> None:
    """Issue 12: a trainer pod of experiment A may patch A's status and nothing else: not B's
    status (a forged result), not A's spec, no Secrets, no pods."""
    ns = installed.namespace
    operator = impersonating(kube_api, ns, installed.operator_account)
    for experiment in ("exp-a", "exp-b"):
        create_as(operator, trainer_identity(ns, experiment))  # as the operator: escalation-checked
    fte = ("finetuneexperiments", "ftbench.io")
    for mine, other in (("exp-a", "exp-b"), ("exp-b", "exp-a")):
        sa = f"{mine}-trainer"
        for verb in ("get", "patch"):
            assert can(kube_api, ns, sa, verb, fte[0], group=fte[1], sub="status", name=mine), (sa, verb)
            assert not can(kube_api, ns, sa, verb, fte[0], group=fte[1], sub="status", name=other), (sa, verb, other)
        for verb, resource, group, sub, name in [
            ("patch", *fte, "status", ""),  # no name: any experiment
            ("list", *fte, "", ""),
            ("get", *fte, "", mine),
            ("patch", *fte, "", mine),
            ("update", *fte, "status", mine),
            ("get", "secrets", "", "", ""),
            ("list", "pods", "", "", ""),
            ("create", "pods", "", "", ""),
        ]:
            assert not can(kube_api, ns, sa, verb, resource, group=group, sub=sub, name=name), (sa, verb, resource)
        assert not can_in(kube_api, ns, sa, "default", "patch", fte[0], group=fte[1], sub="status", name=mine)


def test_operator_cannot_grant_what_it_does_not_hold(installed: Install, kube_api) -> None:
    """The operator may create RoleBindings, but the API server's escalation check refuses any
    that grants more than the operator itself holds (here: the built-in `edit` ClusterRole)."""
    from kubernetes.client import RbacAuthorizationV1Api
    from kubernetes.client.exceptions import ApiException

    ns = installed.namespace
    rbac = RbacAuthorizationV1Api(impersonating(kube_api, ns, installed.operator_account))
    binding = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "grab-edit", "namespace": ns},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    role = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": {"name": "grab-secrets", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }
    for create, obj in ((rbac.create_namespaced_role_binding, binding), (rbac.create_namespaced_role, role)):
        with pytest.raises(ApiException) as refused:
            create(ns, obj)
        assert refused.value.status == 403, obj["kind"]
        assert "attempting to grant RBAC permissions not currently held" in str(refused.value.body)


def test_namespaced_mode_grants_nothing_outside_the_watched_namespaces(kube_api, namespace: str) -> None:
    for install in _install(kube_api, namespace, {"watch": {"namespaces": [namespace]}}):
        sa = install.operator_account
        assert can(kube_api, namespace, sa, "create", "jobs", group="batch")
        assert can(kube_api, namespace, sa, "patch", "finetuneexperiments", group="ftbench.io", sub="status")
        for verb, resource, group in [("create", "jobs", "batch"), ("list", "finetuneexperiments", "ftbench.io")]:
            assert not can_in(kube_api, namespace, sa, "default", verb, resource, group=group, sub="")
        assert not can(kube_api, namespace, sa, "get", "secrets")
