"""The namespaced mode (`--namespace NS`) acts on its namespace only.

It runs against a control plane of its own: the session's cluster-wide operator would otherwise
act on every namespace and hide what this one ignores.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from operator_testkit import lora_spec, wait_for

from ftbench.api.crd import crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench_devcluster import ControlPlane
from ftbench_devcluster.crds import install_crd

pytestmark = pytest.mark.k8s


def test_namespaced_operator_ignores_other_namespaces(
    own_cluster: ControlPlane, tmp_path: Path, operator_process: Any
) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    core, custom, batch = client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api)
    install_crd(api, crd())
    for ns in ("watched", "other"):
        core.create_namespace({"metadata": {"name": ns}})
    operator = operator_process(own_cluster.kubeconfig, tmp_path).start("--namespace", "watched")
    try:
        for ns in ("watched", "other"):
            body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "exp"}}
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {**body, "spec": lora_spec()})

        def watched_phase() -> str | None:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, "watched", PLURAL, "exp")
            return (obj.get("status") or {}).get("phase")

        assert wait_for(watched_phase, timeout=60, what="the watched experiment gets a phase") == "Pending"
        assert batch.list_namespaced_job("watched").items
        time.sleep(3)  # the watched one was handled; the other would have been by now too
        other = custom.get_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, "exp")
        assert not other.get("status") and not batch.list_namespaced_job("other").items
    finally:
        operator.stop()
