"""Rendering the Helm chart with real Helm (helm-python-sdk bundles Helm as a library), for tests.

The chart is rendered exactly as `helm template` would; tests then look at the objects as data.
Shared by the offline chart tests and the control-plane install tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ftbench"
RELEASE = "ftb"

# Seed 002's RoCE cluster as chart values: the profile must survive values -> ConfigMap intact.
ROCE_VALUES: dict[str, Any] = {
    "clusterProfile": {
        "features": {"trainingOperator": True},
        "roce": {
            "network": "multi-nic-network",
            "topologyConfigMap": "topology-roce",
            "serviceAccount": "roce",
            "ncclEnv": {"NCCL_IB_HCA": "=mlx5_0,mlx5_3", "NCCL_IB_GID_INDEX": "1"},
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
}
NAMESPACED_VALUES: dict[str, Any] = {"watch": {"namespaces": ["team-a", "team-b"]}}
MONITOR_VALUES: dict[str, Any] = {
    "metrics": {
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}
TRAINER_RUNTIME_VALUES: dict[str, Any] = {"kubeflowTrainer": {"runtime": {"enabled": True}}}

# The value sets every offline test renders: defaults and each switch that changes the objects.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "roce-profile": ROCE_VALUES,
    "namespaced": NAMESPACED_VALUES,
    "monitors": MONITOR_VALUES,
    "trainer-runtime": TRAINER_RUNTIME_VALUES,
    "no-metrics": {"metrics": {"enabled": False}},
}


def helm():
    """The helm_python module, or a skip naming the dev dependency."""
    return pytest.importorskip("helm_python", reason="dev extra helm-python-sdk not installed")


def render(values: dict[str, Any] | None = None, *, namespace: str = "ftbench", release: str = RELEASE) -> list[dict]:
    """Every object the chart's templates produce (CRDs excluded: Helm installs crds/ separately)."""
    chart = helm().Chart.load(str(CHART))
    try:
        files = chart.render(values=values or {}, name=release, namespace=namespace)
    finally:
        chart.close()
    objects: list[dict] = []
    for path in sorted(files):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(files[path]) if doc)
    return objects


def notes(values: dict[str, Any] | None = None, *, namespace: str = "ftbench") -> str:
    chart = helm().Chart.load(str(CHART))
    try:
        return chart.render(values=values or {}, name=RELEASE, namespace=namespace)["ftbench/templates/NOTES.txt"]
    finally:
        chart.close()


def chart_crds() -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    (obj,) = by_kind(objects, kind)
    return obj
