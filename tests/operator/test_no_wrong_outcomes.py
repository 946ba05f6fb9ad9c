"""Issue 27 on the real control plane and operator: a spec that cannot run as written is Invalid
before anything is created, and the status says which field, which value, why and what to change.

Each case is a spec that `kubectl apply` stores on 1.20 (no CEL there) and that used to start pods
(or take a system priority), then fail in the training library or run something other than asked.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api
from operator_testkit import SELECTOR, lora_spec

pytestmark = pytest.mark.k8s

CASES = [
    # class 1: no whole optimizer step fits the dataset (320 entries < 64 x 8)
    pytest.param(
        {"datasetId": "news-tokens-128kplus-entries-320", "batchSize": 64, "gradientAccumulationSteps": 8},
        ("data.whole-step", "320 entries", "lower batchSize"),
        id="too-few-entries",
    ),
    # class 1: every response is truncated away
    pytest.param(
        {"datasetId": "news-chars-512-entries-4096", "modelMaxLength": 32},
        ("data.response-fits", "modelMaxLength 32", "use modelMaxLength above 64"),
        id="no-response-token",
    ),
    # class 1: longer than the model's position embeddings
    pytest.param(
        {"model": "llama3-8b", "modelMaxLength": 16384},
        ("model.positions", "8192 position embeddings", "use modelMaxLength 8192 or less"),
        id="beyond-positions",
    ),
    # class 6: multi-node with runtime auto on a cluster without Indexed Jobs or a training operator
    pytest.param(
        {"numberGpus": 2, "numberNodes": 2},
        ("spec.run.runtime auto means Job here", "spec.numberNodes is 2", "install the Kubeflow training operator"),
        id="multi-node-auto-on-1.20",
    ),
    # class 7: a system priority class, and an absurd memory request
    pytest.param(
        {"run": {"priorityClassName": "system-node-critical"}},
        ("profile.priority-class", "system-node-critical", "use a workload priority class"),
        id="system-priority",
    ),
    pytest.param(
        {"run": {"memory": "900Ei"}},
        ("bounds.memory", "900Ei", "from 1Gi to 8Ti"),
        id="memory-bound",
    ),
    # class 8: accepted, recorded, but never applied
    pytest.param(
        {"accelerateConfigMixedPrecision": "fp8", "numberGpus": 2, "batchSize": 4},
        ("applied.fp8", "transformer-engine", "use bf16"),
        id="fp8",
    ),
]


@pytest.mark.parametrize(("extra", "expected"), CASES)
def test_a_spec_that_cannot_run_as_written_is_invalid_before_any_child(
    extra: dict[str, Any], expected: tuple[str, ...], operator, kubelet, create_experiment, kube_api, namespace
):
    name = create_experiment(lora_spec(**extra))["metadata"]["name"]
    invalid = kubelet.wait_phase(name, "Invalid")["status"]
    for words in expected:
        assert words in invalid["message"], invalid["message"]
    assert invalid["isValid"] is False and "acceptedSpec" not in invalid
    assert not BatchV1Api(kube_api).list_namespaced_job(namespace, label_selector=SELECTOR).items
    assert not CoreV1Api(kube_api).list_namespaced_config_map(namespace, label_selector=SELECTOR).items
