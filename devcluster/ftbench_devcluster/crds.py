"""Install CustomResourceDefinitions and wait until the API server serves them.

Used by tests and `ftbench dev up`. Creating (not client-side applying) also works for the ~600 KB
PyTorchJob CRD, whose last-applied annotation would exceed the size limit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def install_crd(api: ApiClient, crd: dict[str, Any] | str | Path, *, timeout: float = 60.0) -> str:
    """Create or replace the CRD, then wait for Established. Returns the CRD name."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    doc: dict[str, Any] = crd if isinstance(crd, dict) else yaml.safe_load(Path(crd).read_text())
    ext = client.ApiextensionsV1Api(api)
    name: str = doc["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(doc)  # type: ignore[arg-type]  # the client takes plain dicts
    except ApiException as err:
        if err.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        version = current.metadata.resource_version if current.metadata else None
        body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}
        ext.replace_custom_resource_definition(name, body)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ext.read_custom_resource_definition(name).status
        conditions = {c.type: c.status for c in (status.conditions or [])} if status else {}
        if conditions.get("Established") == "True":
            return name
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")


def without_empty_string_defaults(schema: Any) -> Any:
    """`schema` minus `default: ""` on string properties, for Kubernetes 1.20 API servers.

    The 1.20 server refuses Kubeflow Trainer v2's CRDs with `default: Invalid value: "null": must
    be of type string` on the `name` of every LocalObjectReference (`default: ""`, Kubernetes >= 1.29
    API types); current servers accept them. A list-map key must have a default or be required, so
    there the key becomes required instead. Nothing a test reads changes: an omitted name and an
    empty one mean the same there, and list-map items carry their key.
    """
    if isinstance(schema, list):
        return [without_empty_string_defaults(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: without_empty_string_defaults(v)
        for k, v in schema.items()
        if not (k == "default" and v == "" and schema.get("type") == "string")
    }
    keys = out.get("x-kubernetes-list-map-keys")
    items = out.get("items")
    if keys and isinstance(items, dict):
        missing = [k for k in keys if k not in (items.get("required") or [])]
        if missing:
            out["items"] = {**items, "required": [*(items.get("required") or []), *missing]}
    return out
