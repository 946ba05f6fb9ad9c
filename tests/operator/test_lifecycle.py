"""The operator against the real control plane: the test plays the kubelet."""

from __future__ import annotations

import pytest
from operator_testkit import lora_spec, success_result

pytestmark = pytest.mark.k8s


def test_valid_experiment_succeeds_with_results(operator, kubelet, create_experiment):
    fte = create_experiment(lora_spec())
    name = fte["metadata"]["name"]
    pod = kubelet.wait_pods(1)[0]
    kubelet.run(pod)
    kubelet.wait_phase(name, "Running")
    kubelet.finish(pod, success_result())
    done = kubelet.wait_phase(name, "Succeeded")
    assert done["status"]["results"]["trainTokensPerSecond"] == 1234.5
    assert done["status"]["isValid"] is True
