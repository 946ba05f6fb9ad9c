"""Every example is a valid experiment that renders into schema-valid Kubernetes objects, and the
set covers every experiment kind, so the docs never point at an example that cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.validation import load_profile, validate_document
from ftbench.catalog import load_catalog
from ftbench.contracts.enums import Experiment, Runtime
from ftbench.render.manifests import render_experiment
from ftbench.sweep.points import expand, parse_sweep_document

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
ALL_FILES = sorted(EXAMPLES.glob("*.yaml"))
SWEEP_FILES = [p for p in ALL_FILES if "kind: FineTuneSweep" in p.read_text()]
EXAMPLE_FILES = [p for p in ALL_FILES if p not in SWEEP_FILES]
PROFILE_FILES = sorted((EXAMPLES / "profiles").glob("*.yaml"))
ROCE_PROFILE = EXAMPLES / "profiles" / "roce-cluster.yaml"


def load(path: Path) -> dict:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return doc


def profile_for(doc: dict) -> ClusterProfile:
    """RoCE examples need a RoCE cluster; the rest render for the default (plain GPU) profile."""
    return load_profile(ROCE_PROFILE) if doc["spec"].get("enableRoce") else ClusterProfile()


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    report = validate_document(load(path))
    assert report.ok, report.summary()


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.name)
def test_sweep_example_is_valid_in_every_point(path: Path) -> None:
    parsed = parse_sweep_document(load(path))
    assert parsed.spec is not None, parsed.issues
    expansion = expand(parsed.spec, load_catalog())
    assert expansion.ok and expansion.points, expansion.issues
    assert all(p.valid for p in expansion.points), [p.issues for p in expansion.points]


def test_the_sweep_examples_are_found() -> None:
    assert sorted(p.name for p in SWEEP_FILES) == ["fsdp-scaling.yaml", "packing-sweep.yaml", "sweep.yaml"]


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.name)
def test_example_profile_is_valid(path: Path) -> None:
    load_profile(path)


def test_every_experiment_kind_has_an_example() -> None:
    kinds = {load(p)["spec"].get("experiment", Experiment.FULL.value) for p in EXAMPLE_FILES}
    assert kinds == {e.value for e in Experiment}
    roce = [p.name for p in EXAMPLE_FILES if load(p)["spec"].get("enableRoce")]
    assert any(load(EXAMPLES / name)["spec"].get("numberNodes", 1) > 1 for name in roce), "a multi-node RoCE example"


def test_quickstart_runs_on_a_laptop() -> None:
    """No GPU, no download (the tiny model is generated), a short run."""
    spec = load(EXAMPLES / "quickstart.yaml")["spec"]
    assert spec["numberGpus"] == 0
    assert spec["engine"] == "trl"
    assert load_catalog().models[spec["model"]].generated
    assert spec["datasetId"] == "news-chars-512-entries-4096"
    assert 0 < spec["maxSteps"] <= 25


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_renders_to_valid_objects(path: Path) -> None:
    manifests = pytest.importorskip("ftbench.render.manifests", reason="ftbench.render not available")
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev extra kubernetes-validate missing")
    doc = load(path)
    report = validate_document(doc)
    assert report.spec is not None, report.summary()
    rendered = manifests.render_experiment(
        report.spec, load_catalog(), profile_for(doc), name=doc["metadata"]["name"], namespace="bench"
    )
    assert rendered.objects
    for obj in rendered.objects:
        if obj["apiVersion"].startswith("kubeflow.org/"):
            continue  # checked against the upstream CRD by tests/unit/test_render_schema.py
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    if doc["spec"].get("enableRoce"):
        text = yaml.safe_dump(list(rendered.objects))
        assert "k8s.v1.cni.cncf.io/networks" in text and "NCCL_IB_DISABLE" in text


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_renders_a_schema_valid_trainjob(path: Path) -> None:
    """On a cluster that pins Kubeflow Trainer v2, every example becomes TrainJob(s) that the
    upstream v2.3.0 CRD schema accepts."""
    from tests.unit.test_render_schema import schema_errors, trainjob_schema

    doc = load(path)
    report = validate_document(doc)
    assert report.ok and report.spec is not None, report.summary()
    profile = profile_for(doc).model_copy(update={"runtime": Runtime.TRAIN_JOB})
    rendered = render_experiment(report.spec, catalog_for(profile), profile, name=doc["metadata"]["name"])
    jobs = [o for o in rendered.objects if o["kind"] == "TrainJob"]
    assert rendered.runtime == Runtime.TRAIN_JOB and jobs
    for job in jobs:
        errors = schema_errors(trainjob_schema(), job)
        assert not errors, f"{job['metadata']['name']}:\n{errors}"
