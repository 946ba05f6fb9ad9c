"""The Helm chart, rendered by real Helm: lint-clean, schema-valid objects, least-privilege RBAC,
an operator Deployment that matches the image, and a cluster profile that survives values -> ConfigMap."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from ftbench.api.crd import all_crds, crd_yaml
from ftbench.api.profile import ClusterProfile
from tests.ship.chart import (
    CHART,
    NAMESPACED_VALUES,
    REPO,
    ROCE_VALUES,
    VALUE_SETS,
    by_kind,
    chart_crds,
    helm,
    notes,
    one,
    render,
)

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev extra kubernetes-validate not installed")
# The oldest schema kubernetes-validate ships and the newest it knows.
KUBERNETES_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# prometheus-operator kinds have no schema in kubernetes-validate; checked structurally below. The
# ClusterTrainingRuntime is checked against Trainer's own CRD (test_chart_trainer_runtime.py).
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "ClusterTrainingRuntime"}


@pytest.mark.parametrize("filename", sorted(all_crds()))
def test_chart_crds_are_the_generated_crds(filename: str) -> None:
    committed = (CHART / "crds" / filename).read_text()
    assert committed == crd_yaml(document=all_crds()[filename]), "stale: run `ftbench crd -o helm/ftbench/crds`"
    assert committed == (REPO / "crds" / filename).read_text()


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_is_clean(name: str) -> None:
    result = helm().lint(str(CHART), values=VALUE_SETS[name], strict=True)
    assert result["errors"] == [], result
    assert result["messages"] == [], result


def test_schema_rejects_unknown_values() -> None:
    """values.schema.json closes every section, so a typo fails the install instead of being ignored."""
    helm_python = helm()
    with pytest.raises(helm_python.HelmError, match="namespace"):
        render({"watch": {"namespace": ["a"]}})
    with pytest.raises(helm_python.HelmError, match="runAsNonRoot"):
        render({"podSecurityContext": {"runAsNonRoot": False}})


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_objects_validate_against_kubernetes_schemas(name: str, version: str) -> None:
    # The CRD's CEL rules carry fieldPath/reason (Kubernetes >= 1.28; older servers drop them).
    crds = chart_crds() if version == KUBERNETES_VERSIONS[-1] else []
    for obj in [*render(VALUE_SETS[name]), *crds]:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {err}")


def test_monitors_select_the_metrics_port() -> None:
    objects = render(VALUE_SETS["monitors"])
    service = one(objects, "Service")
    selector = one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    for kind, endpoints in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        monitor = one(objects, kind)
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert (
            monitor["spec"]["selector"]["matchLabels"].items() <= {**selector, **service["metadata"]["labels"]}.items()
        )
        assert monitor["spec"][endpoints][0]["port"] == "metrics"
    assert not by_kind(render(), "ServiceMonitor"), "monitors need prometheus-operator: off by default"


def test_the_trainer_pod_monitor_scrapes_what_the_operator_renders() -> None:
    """The trainers' live metrics (ftbench.contracts.live_metrics): the PodMonitor's selector matches the
    pods an experiment renders to, in any namespace, on the port their container declares."""
    from ftbench.api.spec import FineTuneExperimentSpec
    from ftbench.catalog import load_catalog
    from ftbench.contracts.labels import EXPERIMENT_LABEL
    from ftbench.contracts.live_metrics import METRICS_PORT_NAME, TRAINER_METRICS_PORT
    from ftbench.render.manifests import render_experiment

    values = {"metrics": {"enabled": True, "trainerPodMonitor": {"enabled": True}}}
    [monitor] = [m for m in by_kind(render(values), "PodMonitor") if m["metadata"]["name"].endswith("-trainers")]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    [expression] = monitor["spec"]["selector"]["matchExpressions"]
    assert expression == {"key": EXPERIMENT_LABEL, "operator": "Exists"}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == METRICS_PORT_NAME
    spec = FineTuneExperimentSpec.model_validate(
        {
            "model": "llama3.1-8b",
            "modelMaxLength": 1024,
            "batchSize": 2,
            "numberGpus": 1,
            "gpuModel": "NVIDIA-A100-SXM4-80GB",
        }
    )
    rendered = render_experiment(spec, load_catalog(), ClusterProfile(), name="x", namespace="team-a")
    [job] = [o for o in rendered.objects if o["kind"] == "Job"]
    template = job["spec"]["template"]
    assert EXPERIMENT_LABEL in template["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    assert ports[METRICS_PORT_NAME] == TRAINER_METRICS_PORT
    assert not [m for m in by_kind(render(), "PodMonitor")], "off by default"


def _container(objects: list[dict]) -> dict[str, Any]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_deployment_is_one_hardened_replica() -> None:
    objects = render()
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = _container(objects)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "a read-only root needs a writable /tmp"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FTBENCH_OPERATOR_METRICS_PORT"] == "9090"
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert "--standalone" in container["args"]
    assert "--all-namespaces" in container["args"]


def test_operator_module_is_the_images() -> None:
    """The chart's `kopf run -m MODULE` and Dockerfile.operator's must name the same module."""
    args = _container(render())["args"]
    module = args[args.index("-m") + 1]
    assert f'"-m", "{module}"' in (REPO / "Dockerfile.operator").read_text()


def test_namespaced_mode_watches_only_the_listed_namespaces() -> None:
    objects = render(NAMESPACED_VALUES)
    args = _container(objects)["args"]
    assert "--all-namespaces" not in args
    assert [a for a in args if a.startswith("--namespace=")] == ["--namespace=team-a", "--namespace=team-b"]
    operator_roles = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == "ftb-ftbench"]
    assert sorted(r["metadata"]["namespace"] for r in operator_roles) == ["team-a", "team-b"]
    # Cluster-wide, the operator only discovers CRDs, namespaces and Trainer v2 runtimes, and checks
    # PriorityClasses exist.
    (cluster_role,) = by_kind(objects, "ClusterRole")
    assert {res for rule in cluster_role["rules"] for res in rule["resources"]} == {
        "customresourcedefinitions",
        "namespaces",
        "clustertrainingruntimes",
        "priorityclasses",
    }
    assert {verb for rule in cluster_role["rules"] for verb in rule["verbs"]} == {"get", "list", "watch"}
    # Training pods' accounts are the operator's per-experiment ones: the chart makes only its own.
    assert [sa["metadata"]["name"] for sa in by_kind(objects, "ServiceAccount")] == ["ftb-ftbench"]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_rule_grants_secrets_or_wildcards(name: str) -> None:
    for role in [o for o in render(VALUE_SETS[name]) if o["kind"] in ("Role", "ClusterRole")]:
        for rule in role["rules"]:
            assert "secrets" not in rule["resources"], role["metadata"]["name"]
            assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"], role["metadata"]["name"]


def test_no_namespace_wide_trainer_role() -> None:
    """Issue 12: a Role shared by a namespace would let any training pod patch any experiment."""
    for role in by_kind(render(), "Role"):
        assert all("finetuneexperiments/status" not in r["resources"] for r in role["rules"]), role


@pytest.mark.parametrize("values", [{}, ROCE_VALUES])
def test_profile_configmap_is_a_valid_cluster_profile(values: dict) -> None:
    objects = render(values)
    config_map = one(objects, "ConfigMap")
    profile = ClusterProfile.model_validate(yaml.safe_load(config_map["data"]["profile.yaml"]))
    assert profile.service_account is None, "unset: each experiment gets its own account"
    assert profile == ClusterProfile.model_validate(values.get("clusterProfile", {}))
    # How ftbench_operator.settings finds it, and the label its ConfigMap watch selects on.
    env = {e["name"]: e.get("value") for e in _container(objects)["env"]}
    assert env["FTBENCH_OPERATOR_PROFILE_CONFIG_MAP"] == config_map["metadata"]["name"]
    assert env["FTBENCH_OPERATOR_PROFILE_KEY"] in config_map["data"]
    assert "POD_NAMESPACE" in env
    assert config_map["metadata"]["labels"]["ftbench.io/profile"] == "true"


def test_profile_change_restarts_the_operator() -> None:
    def checksum(values: dict) -> str:
        return one(render(values), "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/cluster-profile"
        ]

    assert checksum({}) != checksum(ROCE_VALUES)


def test_notes_show_how_to_apply_and_read_results() -> None:
    text = notes()
    assert "kubectl apply -n ftbench -f examples/" in text
    assert "kubectl get fte" in text
    example = text.split("-f ", 1)[1].split()[0]
    assert (REPO / example).is_file(), f"NOTES.txt names {example}, which does not exist"


def test_the_profile_part_of_the_values_schema_is_generated_and_fresh() -> None:
    """Issue 44.2: clusterProfile's schema comes from ClusterProfile (ftbench.api.chart_schema)."""
    import json

    from ftbench.api.chart_schema import VALUES_SCHEMA, render

    committed = VALUES_SCHEMA.read_text()
    assert committed == render(json.loads(committed)), "stale: run `python -m ftbench.api.chart_schema --write`"


@pytest.mark.parametrize(
    ("profile", "where"),
    [
        ({"gpuResource": ""}, "/clusterProfile/gpuResource"),
        ({"gpuNodeLabel": "gpu model"}, "/clusterProfile/gpuNodeLabel"),
        ({"podLabels": {"team": "my team!"}}, "/clusterProfile/podLabels/team"),
        ({"podLabels": {"my team!": "x"}}, "my team!"),
        ({"defaultMemory": "lots"}, "/clusterProfile/defaultMemory"),
        ({"serviceAccount": "Bad_SA"}, "/clusterProfile/serviceAccount"),
        ({"images": {"repository": "Registry/My Trainer"}}, "/clusterProfile/images/repository"),
        ({"images": {"pullPolicy": "Sometimes"}}, "/clusterProfile/images/pullPolicy"),
        ({"storage": {"models": {"mountPath": "relative"}}}, "/clusterProfile/storage/models/mountPath"),
        ({"gpusPerNode": 0}, "/clusterProfile/gpusPerNode"),
    ],
)
def test_helm_install_refuses_a_profile_the_cluster_would_refuse(profile: dict[str, Any], where: str) -> None:
    """What would become objects the API server or the kubelet refuses is refused by `helm install`,
    and by the model the operator starts with (the same source)."""
    from pydantic import ValidationError

    with pytest.raises(helm().HelmError, match=re.escape(where)):
        render({"clusterProfile": profile})
    with pytest.raises(ValidationError):
        ClusterProfile.model_validate(profile)


def test_the_grafana_dashboard_ships_as_the_generated_json_under_the_sidecar_label() -> None:
    """Off by default; enabled, one ConfigMap whose JSON is the generated dashboard (fresh), every
    panel a Prometheus query (tests/operator/test_prometheus.py runs them against a real Prometheus)."""
    import json

    from ftbench.generated import dashboard

    assert dashboard.main([]) == 0, "stale: python -m ftbench.generated.dashboard --write"
    assert not [o for o in render() if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    values = {"metrics": {"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}}
    [config] = [o for o in render(values) if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1" and config["metadata"]["namespace"] == "monitoring"
    shipped = json.loads(config["data"]["ftbench-overview.json"])
    assert shipped == dashboard.dashboard()
    assert [t["expr"] for p in shipped["panels"] for t in p["targets"]] == [p.expr for p in dashboard.PANELS]
