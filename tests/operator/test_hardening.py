"""Issue 12 regressions on the real control plane and operator: what a user writes cannot change
what is measured, reach a flag, take over another experiment's children, or leave a run hanging.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from operator_testkit import failed_result, lora_spec, wait_for

from ftbench.api.resource import GROUP, PLURAL, VERSION
from ftbench.contracts.plan import PLAN_FILENAME

pytestmark = pytest.mark.k8s


def plan_of(kube_api: Any, namespace: str, config_map: str) -> dict[str, Any]:
    data = CoreV1Api(kube_api).read_namespaced_config_map(config_map, namespace).data
    return json.loads(data[PLAN_FILENAME])


def patch_experiment(kube_api: Any, namespace: str, name: str, body: dict[str, Any]) -> None:
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def test_accepted_spec_annotation_cannot_override_what_runs(operator, kubelet, create_experiment, kube_api, namespace):
    """Item 1: a user-set `ftbench.io/accepted-spec` annotation (at create, or edited before a retry)
    is ignored; the spec shown is the spec run, recorded in status where only the operator writes."""
    forged = json.dumps({"generation": 1, "spec": lora_spec(batchSize=64, maxSteps=99999)})
    annotations = {"ftbench.io/accepted-spec": forged}
    name = create_experiment(lora_spec(maxSteps=5), annotations=annotations)["metadata"]["name"]
    pending = kubelet.wait_phase(name, "Pending")
    assert pending["status"]["acceptedSpec"]["batchSize"] == 4
    plan = plan_of(kube_api, namespace, f"{name}-a0-plan")
    assert plan["topology"]["batchSize"] == 4 and plan["training"]["maxSteps"] == 5

    kubelet.finish(kubelet.wait_pods(1)[0], failed_result())
    kubelet.wait_phase(name, "Failed")
    patch_experiment(
        kube_api, namespace, name, {"metadata": {"annotations": {**annotations, "ftbench.io/retry": "now"}}}
    )
    wait_for(lambda: kubelet.experiment(name)["status"].get("attempt") == 1, what="attempt 1")
    plan = wait_for(lambda: plan_of(kube_api, namespace, f"{name}-a1-plan"), what="attempt 1 plan")
    assert plan["topology"]["batchSize"] == 4 and plan["training"]["maxSteps"] == 5
    assert BatchV1Api(kube_api).read_namespaced_job(f"{name}-a1", namespace)
