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

    if not isinstance(crd, dict):
        crd = yaml.safe_load(Path(crd).read_text())
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as err:
        if err.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version}}
        ext.replace_custom_resource_definition(name, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ext.read_custom_resource_definition(name).status
        conditions = {c.type: c.status for c in (status.conditions or [])} if status else {}
        if conditions.get("Established") == "True":
            return name
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
