"""Issue 27 on the real control plane and operator: a spec that cannot run as written is Invalid
before anything is created, and the status says which field, which value, why and what to change.

Each case is a spec that `kubectl apply` stores on 1.20 (no CEL there) and that used to start pods
(or take a system priority), then fail in the training library or run something other than asked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api
from operator_testkit import SELECTOR, lora_spec, success_result, wait_for

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


def test_a_retry_after_an_edit_runs_the_accepted_spec_and_says_so(
    operator, kubelet, create_experiment, kube_api, namespace
):
    """Issue 27.5: the first attempt fails before it starts (its PriorityClass is missing), the spec
    is edited (1.20 stores it), the class is created and the run retried: attempt 1 runs the spec
    accepted at generation 1, and the status and SpecChangeIgnored say exactly that."""
    import json
    import uuid

    from kubernetes.client import CustomObjectsApi, SchedulingV1Api

    from ftbench.api.resource import GROUP, PLURAL, VERSION
    from ftbench.contracts.plan import PLAN_FILENAME

    custom = CustomObjectsApi(kube_api)
    priority = f"bench-{uuid.uuid4().hex[:8]}"
    name = create_experiment(lora_spec(run={"priorityClassName": priority}))["metadata"]["name"]
    failed = kubelet.wait_phase(name, "Failed")["status"]
    assert failed["acceptedSpec"]["batchSize"] == 4 and failed["acceptedGeneration"] == 1
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"batchSize": 8}})
    ignored = wait_for(
        lambda: next((c for c in kubelet.experiment(name)["status"].get("conditions", [])
                      if c["type"] == "SpecChangeIgnored"), None), what="SpecChangeIgnored"
    )  # fmt: skip
    assert "generation 1's spec" in ignored["message"] and "create a new FineTuneExperiment" in ignored["message"]
    SchedulingV1Api(kube_api).create_priority_class({"metadata": {"name": priority}, "value": 1000})
    try:
        annotate = {"metadata": {"annotations": {"ftbench.io/retry": "1"}}}
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, annotate)
        pending = wait_for(
            lambda: (s := kubelet.experiment(name)["status"]).get("attempt") == 1 and s.get("job") and s,
            what="attempt 1 started",
        )
        assert pending["acceptedSpec"]["batchSize"] == 4 and pending["acceptedGeneration"] == 1
        data = CoreV1Api(kube_api).read_namespaced_config_map(f"{name}-a1-plan", namespace).data
        assert json.loads(data[PLAN_FILENAME])["topology"]["batchSize"] == 4
        conditions = {c["type"]: c for c in pending["conditions"]}
        assert "attempt 1 runs the accepted spec of generation 1" in conditions["SpecChangeIgnored"]["message"]
    finally:
        SchedulingV1Api(kube_api).delete_priority_class(priority)


def _watch_phases(kube_api: Any, namespace: str, name: str, until: Any, timeout: float = 120.0) -> list[str]:
    """Every phase the experiment `name` shows until `until(status)` holds (polled)."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    from ftbench.api.resource import GROUP, PLURAL, VERSION

    seen: list[str] = []

    def done() -> bool:
        try:
            fte = CustomObjectsApi(kube_api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException:
            return False
        status = fte.get("status") or {}
        if status.get("phase") and (not seen or seen[-1] != status["phase"]):
            seen.append(status["phase"])
        return bool(until(fte))

    wait_for(done, timeout, what=f"{name}: {seen}")
    return seen


def test_a_handled_record_written_onto_a_new_object_does_not_keep_it_from_running(operator, kubelet, create_experiment):
    """Issue 27.2: kopf records "handled" by name, so the handler of an experiment deleted a moment
    ago can mark its re-created namesake as handled, and kopf then never runs `create` for it (a
    sweep deleted and re-applied at once stalled this way in CI). The operator starts such an
    experiment from its events. Produced for real: the record is on the object when it is created."""
    from ftbench_operator.app import KOPF_PREFIX, LAST_HANDLED

    spec = lora_spec()
    record = {f"{KOPF_PREFIX}/{LAST_HANDLED}": json.dumps({"spec": spec})}
    name = create_experiment(spec, annotations=record)["metadata"]["name"]
    kubelet.wait_phase(name, "Pending")
    kubelet.finish(kubelet.wait_pods(1)[0], success_result())
    assert kubelet.wait_phase(name, "Succeeded")["status"]["results"]
    assert "never started; starting it" in operator.log()


def test_delete_and_recreate_at_once_runs_the_new_one(operator, kubelet, create_experiment, kube_api, namespace):
    """Issue 27.2: the re-created experiment's children must not be confused with the deleted one's
    (still being garbage-collected): it waits (Pending, WaitingForPredecessor) and then runs, with
    children owned by its own uid; it never fails with ChildConflict."""
    from kubernetes.client import CustomObjectsApi

    from ftbench.api.resource import GROUP, PLURAL, VERSION

    custom = CustomObjectsApi(kube_api)
    first = create_experiment(lora_spec(), name="again")
    kubelet.wait_phase("again", "Pending")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "again")
    second = create_experiment(lora_spec(), name="again")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    uid = second["metadata"]["uid"]
    phases = _watch_phases(kube_api, namespace, "again", lambda fte: (fte.get("status") or {}).get("job"))
    assert "Failed" not in phases, phases
    account = CoreV1Api(kube_api).read_namespaced_service_account("again-trainer", namespace)
    assert [ref.uid for ref in account.metadata.owner_references] == [uid]
    job = BatchV1Api(kube_api).read_namespaced_job("again-a0", namespace)
    assert [ref.uid for ref in job.metadata.owner_references] == [uid]
