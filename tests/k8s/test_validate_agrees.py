"""Issue 27.9: `ftbench validate` and the real API server get the same generated documents and agree.

The documents come from the generated CRD itself: a valid experiment, then for each spec field
(and run.<field>) a value past each bound the schema declares (maximum, minimum, maxLength, enum,
pattern, type), the field spelled in snake_case, and metadata.name values the server refuses. The
server answers with a dry-run create. 1.20 prunes unknown fields instead of refusing them, so a
document whose stored spec lost a key counts as refused: what it would run is not what was
written. The CEL rules are not on 1.20; no document here breaks one (each varies one field within
a valid base), so the answers must be equal, document by document.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench.api.validation import validate_document

pytestmark = pytest.mark.k8s

BASE: dict[str, Any] = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 2, "batchSize": 4,
                        "gpuModel": "NVIDIA-A100-SXM4-80GB"}  # fmt: skip


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def _bad_values(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Values just outside what `schema` allows, one per constraint it declares."""
    kind = schema.get("type")
    if "maximum" in schema:
        yield "maximum", schema["maximum"] + 1
    if "minimum" in schema:
        yield "minimum", schema["minimum"] - 1
    if "maxLength" in schema:
        yield "maxLength", "a" * (schema["maxLength"] + 1)
    if "enum" in schema:
        yield "enum", "not-one-of-them"
    if "pattern" in schema:
        yield "pattern", "-a b"
    if kind in ("integer", "number"):
        yield "type", "8"
    if kind == "boolean":
        yield "type", "true"
    if kind == "string" and "enum" not in schema:
        yield "type", 8
    if kind == "array":
        yield "type", "not-a-list"


def documents() -> Iterator[tuple[str, dict[str, Any]]]:
    def doc(spec: dict[str, Any], name: str = "agree") -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}

    yield "good", doc(BASE)
    spec_schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = [((k,), v) for k, v in spec_schema["properties"].items() if k != "run"]
    fields += [(("run", k), v) for k, v in spec_schema["properties"]["run"]["properties"].items()]
    for path, schema in fields:
        for constraint, value in _bad_values(schema):
            spec = copy.deepcopy(BASE)
            (spec.setdefault("run", {}) if len(path) == 2 else spec)[path[-1]] = value
            yield f"{'.'.join(path)}:{constraint}", doc(spec)
        snake = _snake(path[-1])
        if snake != path[-1] and path[-1] not in BASE:
            spec = copy.deepcopy(BASE)
            example = schema.get("default", schema.get("enum", [1])[0] if "enum" in schema else 1)
            (spec.setdefault("run", {}) if len(path) == 2 else spec)[snake] = example
            yield f"{'.'.join(path)}:snake_case", doc(spec)
    for label, name in (("upper", "Lora"), ("underscore", "lora_1"), ("long", "a" * 254), ("dash", "-lora")):
        yield f"metadata.name:{label}", doc(BASE, name)


def _server_refuses(custom: Any, namespace: str, body: dict[str, Any]) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        stored = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
    except ApiException as err:
        assert err.status in (400, 422), err.body
        return True
    written, kept = body["spec"], stored["spec"]
    lost = [k for k in written if k not in kept]
    lost += [f"run.{k}" for k in written.get("run", {}) if k not in kept.get("run", {})]
    return bool(lost)


def test_validate_and_the_api_server_agree_on_every_generated_document(kube_api, ftbench_crd, namespace):
    from kubernetes.client import CustomObjectsApi

    custom = CustomObjectsApi(kube_api)
    cases = list(documents())
    assert len(cases) > 60  # every field's constraints, not a handful
    disagree = []
    for label, body in cases:
        server = _server_refuses(custom, namespace, body)
        ours = not validate_document(body).ok
        if server != ours:
            disagree.append(
                f"{label}: server {'refuses' if server else 'accepts'}, validate {'refuses' if ours else 'accepts'}"
            )
    assert not disagree, "\n".join(disagree)
