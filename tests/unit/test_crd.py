"""The generated CRD: fresh, structural, documented, and carrying the rules as CEL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ftbench.api.crd import CRD_FILENAME, crd, crd_yaml

REPO = Path(__file__).resolve().parents[2]


def test_committed_crd_is_fresh() -> None:
    committed = (REPO / "crds" / CRD_FILENAME).read_text()
    assert committed == crd_yaml(), "crds/ is stale: run `ftbench crd -o crds`"


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from _walk(value, f"{path}.{key}")
        if "items" in node:
            yield from _walk(node["items"], f"{path}[]")


def _root() -> dict:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural() -> None:
    text = yaml.safe_dump(_root())
    for forbidden in ("$ref", "anyOf", "allOf", "oneOf", "$defs", "additionalProperties", "title:"):
        assert forbidden not in text
    for path, node in _walk(_root()):
        assert "type" in node, f"{path} has no type"


def test_every_spec_and_status_field_is_documented() -> None:
    """`kubectl explain` prints these descriptions."""
    root = _root()
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
    for name in ("Phase", "Experiment", "Model", "GPUs", "Batch", "Tokens/s", "PeakMem%", "Valid", "Age"):
        assert name in columns and "priority" not in columns[name]
    assert doc["spec"]["versions"][0]["subresources"] == {"status": {}}
