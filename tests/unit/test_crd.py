"""The generated CRD: fresh, structural, documented, and carrying the rules as CEL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ftbench.api.crd import CRD_FILENAME, SWEEP_CRD_FILENAME, all_crds, crd, crd_yaml, sweep_crd
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.sweep.points import structural_issues

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("filename", sorted(all_crds()))
def test_committed_crds_are_fresh(filename: str) -> None:
    committed = (REPO / "crds" / filename).read_text()
    assert committed == crd_yaml(document=all_crds()[filename]), "crds/ is stale: run `ftbench crd -o crds`"
    assert filename in (CRD_FILENAME, SWEEP_CRD_FILENAME)


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from _walk(value, f"{path}.{key}")
        if "items" in node:
            yield from _walk(node["items"], f"{path}[]")


def _root(document: dict | None = None) -> dict:
    return (document or crd())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("filename", sorted(all_crds()))
def test_schema_is_structural(filename: str) -> None:
    root = _root(all_crds()[filename])
    text = yaml.safe_dump(root)
    for forbidden in ("$ref", "anyOf", "allOf", "oneOf", "$defs", "title:"):
        assert forbidden not in text
    for path, node in _walk(root):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"


def test_only_the_sweep_matrix_is_a_map() -> None:
    """additionalProperties only where a map is meant: the matrix (field -> values)."""
    assert "additionalProperties" not in yaml.safe_dump(_root())
    sweep_spec = _root(sweep_crd())["properties"]["spec"]
    assert sweep_spec["properties"]["matrix"]["additionalProperties"]["type"] == "array"
    assert "additionalProperties" not in yaml.safe_dump({k: v for k, v in sweep_spec["properties"].items()
                                                         if k != "matrix"})  # fmt: skip


@pytest.mark.parametrize("filename", sorted(all_crds()))
def test_every_spec_and_status_field_is_documented(filename: str) -> None:
    """`kubectl explain` prints these descriptions."""
    root = _root(all_crds()[filename])
    for top in ("spec", "status"):
        for path, node in _walk(root["properties"][top], top):
            if path.endswith("[]") or path in ("status", "spec"):
                continue
            assert node.get("description"), f"{path} has no description"


def test_status_is_fully_declared() -> None:
    status = _root()["properties"]["status"]
    assert "x-kubernetes-preserve-unknown-fields" not in yaml.safe_dump(status)
    props = status["properties"]
    for key in (
        "phase",
        "conditions",
        "observedGeneration",
        "isValid",
        "progress",
        "results",
        "stability",
        "environment",
        "job",
        "startTime",
        "completionTime",
        "attempt",
    ):
        assert key in props
    assert props["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    results = props["results"]["properties"]
    assert "trainTokensPerSecond" in results and "gpuMemoryUtilizationPeakPercent" in results


def test_spec_constraints_and_cel() -> None:
    spec = _root()["properties"]["spec"]
    assert spec["required"] == ["model", "modelMaxLength", "numberGpus", "batchSize"]
    assert spec["properties"]["batchSize"]["minimum"] == 1
    assert spec["properties"]["numberNodes"]["minimum"] == 1
    assert "adamw_torch" in spec["properties"]["optim"]["enum"]
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert rules[0] == "self == oldSelf"
    assert any("self.batchSize %" in r for r in rules)


def test_names_and_printer_columns() -> None:
    doc = crd()
    names = doc["spec"]["names"]
    assert names["shortNames"] == ["fte"] and names["categories"] == ["ftbench"]
    columns = {c["name"]: c for c in doc["spec"]["versions"][0]["additionalPrinterColumns"]}
    for name in (
        "Phase",
        "Experiment",
        "Model",
        "GPUs",
        "Batch",
        "Tokens/s",
        "CI95±%",
        "CI",
        "Noise",
        "PeakMem%",
        "BusBW",
        "Valid",
        "Age",
    ):
        assert name in columns and "priority" not in columns[name]
    order = list(columns)
    # A throughput is shown with its spread, in percent, and which kind of sure that spread is (issue 47.2).
    assert order.index("CI95±%") == order.index("Tokens/s") + 1 and order.index("CI") == order.index("CI95±%") + 1
    assert columns["CI95±%"]["jsonPath"] == ".status.results.throughputCi95Percent"
    assert doc["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_sweep_names_columns_and_template() -> None:
    doc = sweep_crd()
    names = doc["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "FineTuneSweep", "finetunesweeps", ["fts"], ["ftbench"])  # fmt: skip
    columns = [c["name"] for c in doc["spec"]["versions"][0]["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Phase", "Done", "Best Tokens/s", "Age"]
    spec = _root(doc)["properties"]["spec"]
    template = spec["properties"]["template"]
    assert "required" not in template and "batchSize" in template["properties"]
    assert not [path for path, node in _walk(template) if "default" in node]  # the matrix fills template gaps
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert rules[0] == "self == oldSelf" and "self.matrix.all(k" in rules[1]


@pytest.mark.parametrize(
    ("matrix", "ok"), [({"batchSize": [1], "run.queueName": ["q"]}, True), ({"bogus": [1]}, False)]
)
def test_sweep_matrix_cel_agrees_with_the_operator(matrix: dict, ok: bool) -> None:
    """The API server's check (Kubernetes >= 1.25) refuses what `expand` calls a structural issue."""
    celpy = pytest.importorskip("celpy")
    env = celpy.Environment()
    rule = _root(sweep_crd())["properties"]["spec"]["x-kubernetes-validations"][1]["rule"]
    program = env.program(env.compile(rule))
    assert bool(program.evaluate({"self": celpy.json_to_cel({"matrix": matrix})})) is ok
    spec = FineTuneSweepSpec.model_validate({"template": {}, "matrix": matrix})
    assert (not [i for i in structural_issues(spec) if i.rule == "sweep.field"]) is ok


def _fields(node: dict, path: str = "") -> list[tuple[str, dict]]:
    """Every named property of a schema, with its path (items and map values belong to their field)."""
    found = []
    for name, child in (node.get("properties") or {}).items():
        found.append((f"{path}.{name}", child))
        found += _fields(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _fields(node[key], path + ("[]" if key == "items" else "{}"))
    return found


@pytest.mark.parametrize("filename", sorted(all_crds()))
def test_every_field_has_a_type_and_a_description(filename: str) -> None:
    """What `kubectl explain` prints: a `nullable` field is published without its type (`<>`), so none is
    nullable; every field says what it is (but metadata, which the API server lets a CRD give a type only)."""
    schema = all_crds()[filename]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = [(p, f) for p, f in _fields(schema) if p != ".metadata"]
    assert not [p for p, f in fields if f.get("nullable")]
    assert not [p for p, f in fields if "type" not in f and not f.get("x-kubernetes-preserve-unknown-fields")]
    assert not [p for p, f in fields if not f.get("description")]
