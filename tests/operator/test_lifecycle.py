"""The operator against the real control plane: the test plays the kubelet.

Each test creates experiments in its own namespace and drives the pods the Job controller
creates through the states a kubelet would report.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from operator_testkit import (
    failed_result,
    lora_spec,
    oom_result,
    success_result,
    ts,
    wait_for,
)

from ftbench.api.resource import GROUP, PLURAL, VERSION
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.labels import EXPERIMENT_LABEL, label_value
from ftbench.contracts.network import BandwidthSample, Collective, NetworkInEffect, NetworkTransport
from ftbench.contracts.results import EXIT_NETWORK_UNFIT, Outcome

pytestmark = pytest.mark.k8s


def conditions(fte):
    return {c["type"]: c for c in fte["status"].get("conditions", [])}


def events(kube_api, namespace, name):
    items = CoreV1Api(kube_api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return {e.reason for e in items}


def test_valid_experiment_succeeds_with_results_in_columns(
    operator, kubelet, create_experiment, kube_api, namespace, control_plane
):
    name = create_experiment(lora_spec())["metadata"]["name"]
    pending = kubelet.wait_phase(name, "Pending")
    assert pending["status"]["job"] == {"apiVersion": "batch/v1", "kind": "Job", "name": f"{name}-a0"}
    assert conditions(pending)["Valid"]["status"] == "True"
    job = BatchV1Api(kube_api).read_namespaced_job(f"{name}-a0", namespace)
    assert job.metadata.owner_references[0].kind == "FineTuneExperiment"
    config_map = CoreV1Api(kube_api).read_namespaced_config_map(f"{name}-a0-plan", namespace)
    assert config_map.metadata.owner_references[0].name == name

    pod = kubelet.wait_pods(1)[0]
    kubelet.run(pod)
    running = kubelet.wait_phase(name, "Running")
    assert conditions(running)["Running"]["status"] == "True" and running["status"]["startTime"]
    kubelet.finish(pod, success_result())
    done = kubelet.wait_phase(name, "Succeeded")
    status = done["status"]
    assert status["results"]["trainTokensPerSecond"] == 1234.5
    assert status["environment"]["gpuName"] == "NVIDIA A100"
    assert status["isValid"] is True and status["completionTime"]
    assert conditions(done)["Succeeded"]["status"] == "True"
    assert conditions(done)["Valid"]["lastTransitionTime"] == conditions(pending)["Valid"]["lastTransitionTime"]

    def kubectl_get(*extra: str) -> list[str]:
        out = subprocess.run(
            ["kubectl", "get", "fte", name, "-n", namespace, *extra],
            env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.splitlines()

    row = kubectl_get()[1].split()
    assert row[:2] == [name, "Succeeded"] and "1234.5" in row and "87.5" in row and "true" in row
    header, wide = kubectl_get("-o", "wide")
    # Columns start where their header does (empty cells leave a gap, not a token).
    assert [wide[header.index(h) :].split()[0] for h in ("ROWSTRAINED", "ROWSOFFERED")] == ["1366", "4096"]
    wait_for(lambda: {"Started", "ResultsRecorded"} <= events(kube_api, namespace, name), 10, what="events")
    # The operator observes the status it patched when the watch brings it back: a moment after the API has it.
    series = f'ftbench_result_train_tokens_per_second{{experiment="finetune_lora_benchmark-v1.0.0",gpus="1",model="llama3.1-8b",name="{name}",namespace="{namespace}"}} 1234.5'  # fmt: skip
    wait_for(lambda: series in operator.metrics(), 10, what="result metrics")
    assert 'ftbench_experiments{phase="Succeeded"}' in operator.metrics()


def test_invalid_spec_creates_nothing(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec(numberGpus=2, batchSize=3))["metadata"]["name"]
    fte = kubelet.wait_phase(name, "Invalid")
    assert fte["status"]["isValid"] is False
    assert "is_valid.1" in fte["status"]["invalidReason"]
    valid = conditions(fte)["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec" and "is_valid.1" in valid["message"]
    assert valid["observedGeneration"] == fte["metadata"]["generation"]
    assert not BatchV1Api(kube_api).list_namespaced_job(namespace).items
    wait_for(lambda: "InvalidSpec" in events(kube_api, namespace, name), 10, what="InvalidSpec event")


def test_gpu_oom_is_invalid(operator, kubelet, create_experiment):
    name = create_experiment(lora_spec())["metadata"]["name"]
    pod = kubelet.wait_pods(1)[0]
    kubelet.finish(pod, oom_result())
    fte = kubelet.wait_phase(name, "Invalid")
    assert fte["status"]["isValid"] is False
    assert fte["status"]["invalidReason"].startswith("GpuOutOfMemory")
    assert "results" not in fte["status"]
    assert conditions(fte)["Succeeded"]["reason"] == "GpuOutOfMemory"


def _host_oom(kubelet, pod):
    kubelet.terminate(pod, 137, "", reason="OOMKilled")


def _evicted(kubelet, pod):
    kubelet.core.patch_namespaced_pod_status(
        pod.metadata.name,
        kubelet.namespace,
        {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}},
    )


def _image_pull(kubelet, pod):
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    kubelet.write(pod, "Pending", waiting, started=ts(-60))


def _trainer_failed(kubelet, pod):
    kubelet.finish(pod, failed_result())


def _crash_without_result(kubelet, pod):
    kubelet.terminate(pod, 1, "Traceback (most recent call last):\nRuntimeError: NCCL timeout")


@pytest.mark.parametrize(
    ("play", "reason", "words"),
    [
        (_host_oom, "OOMKilled", "host's memory limit"),
        (_evicted, "Evicted", "low on resource"),
        (_image_pull, "ImagePullBackOff", "Back-off pulling image"),
        (_trainer_failed, "TrainingError", "ValueError"),
        (_crash_without_result, "PodFailed", "NCCL timeout"),
    ],
)
def test_other_failures_fail_with_a_precise_reason(operator, kubelet, create_experiment, play, reason, words):
    name = create_experiment(lora_spec())["metadata"]["name"]
    pod = kubelet.wait_pods(1)[0]
    play(kubelet, pod)
    fte = kubelet.wait_phase(name, "Failed")
    assert conditions(fte)["Succeeded"]["reason"] == reason
    assert words in fte["status"]["message"]
    assert "isValid" not in fte["status"] and "results" not in fte["status"]


def test_deadline_exceeded(operator, kubelet, create_experiment, kube_api):
    # The Job controller fails the Job (and deletes its pod) once the deadline passes; with
    # a 1 s deadline that can happen before a kubelet would have started the pod.
    name = create_experiment(lora_spec(run={"activeDeadlineSeconds": 1}))["metadata"]["name"]
    try:
        fte = kubelet.wait_phase(name, "Failed", timeout=30)
    except AssertionError:
        # Kubernetes 1.20's Job controller checks the deadline when it syncs the Job, which it schedules
        # once, when it sets the start time; on a loaded CI machine that one sync was seen not to fail the
        # Job (no further Job event in 60 s). Any change to the Job makes it sync again: the operator's
        # part, reading DeadlineExceeded, is what this test is about.
        from kubernetes.client import BatchV1Api

        patch = {"metadata": {"annotations": {"test.ftbench.io/resync": "1"}}}
        BatchV1Api(kube_api).patch_namespaced_job(f"{name}-a0", kubelet.namespace, patch)
        fte = kubelet.wait_phase(name, "Failed", timeout=60)
    assert conditions(fte)["Succeeded"]["reason"] == "DeadlineExceeded"


def test_retry_annotation_starts_next_attempt(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec())["metadata"]["name"]
    pod = kubelet.wait_pods(1)[0]
    _crash_without_result(kubelet, pod)
    kubelet.wait_phase(name, "Failed")
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": {"ftbench.io/retry": "1"}}}
    )
    wait_for(lambda: kubelet.experiment(name)["status"].get("attempt") == 1, what="attempt 1")
    new_pod = kubelet.wait_pods(1, selector="ftbench.io/attempt=1")[0]
    wait_for(
        lambda: [j.metadata.name for j in BatchV1Api(kube_api).list_namespaced_job(namespace).items] == [f"{name}-a1"],
        what="only the new attempt's Job",
    )
    kubelet.finish(new_pod, success_result())
    fte = kubelet.wait_phase(name, "Succeeded")
    assert fte["status"]["attempt"] == 1 and fte["status"]["job"]["name"] == f"{name}-a1"
    assert "ftbench.io/retry" not in fte["metadata"].get("annotations", {})


def test_retry_of_a_succeeded_experiment_is_ignored(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec())["metadata"]["name"]
    kubelet.finish(kubelet.wait_pods(1)[0], success_result())
    kubelet.wait_phase(name, "Succeeded")
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": {"ftbench.io/retry": "now"}}}
    )
    wait_for(
        lambda: "ftbench.io/retry" not in kubelet.experiment(name)["metadata"].get("annotations", {}),
        what="annotation consumed",
    )
    fte = kubelet.experiment(name)
    assert fte["status"]["phase"] == "Succeeded" and fte["status"]["attempt"] == 0
    wait_for(lambda: "RetryIgnored" in events(kube_api, namespace, name), 10, what="RetryIgnored event")


def test_stability_aggregates_five_trials(operator, kubelet, create_experiment):
    spec = lora_spec(experiment="finetune_full_stability-v1.0.0", numberGpus=8, batchSize=8)
    name = create_experiment(spec)["metadata"]["name"]
    plays = [success_result, oom_result, success_result, failed_result, success_result]
    for trial, make in enumerate(plays):
        pod = kubelet.wait_pods(1, selector=f"ftbench.io/trial={trial}")[0]
        kubelet.run(pod)
        kubelet.finish(pod, make(trial=trial), exit_code=0)  # FTBENCH_TRIAL_FAILURE_EXIT_ZERO
        if trial < len(plays) - 1:
            wait_for(
                lambda t=trial: (
                    (kubelet.experiment(name)["status"].get("stability") or {}).get("trialsFinished") == t + 1
                ),
                what=f"trial {trial} aggregated",
            )
    fte = kubelet.wait_phase(name, "Succeeded")
    stability = fte["status"]["stability"]
    assert stability["trialsFinished"] == 5 and stability["trialsPlanned"] == 5
    assert stability["fNoError"] == 0.6 and stability["fGpuOom"] == 0.2 and stability["fOtherError"] == 0.2
    assert [t["outcome"] for t in stability["trials"]] == ["Succeeded", "GpuOom", "Succeeded", "Failed", "Succeeded"]


def test_repeats_run_one_after_another_and_report_across_them(operator, kubelet, create_experiment):
    name = create_experiment(lora_spec(repeats=3))["metadata"]["name"]
    for repeat, tokens in enumerate((1000.0, 1100.0, 1200.0)):
        pod = kubelet.wait_pods(1, selector=f"ftbench.io/trial={repeat}")[0]
        kubelet.run(pod)
        kubelet.finish(pod, success_result(trial=repeat, tokens_per_second=tokens), exit_code=0)
    fte = kubelet.wait_phase(name, "Succeeded")
    repeats, results = fte["status"]["repeats"], fte["status"]["results"]
    assert (repeats["planned"], repeats["finished"]) == (3, 3) and "stability" not in fte["status"]
    assert repeats["steadyStateTokensPerSecond"] == [1000.0, 1100.0, 1200.0] and repeats["mean"] == 1100.0
    assert results["trainTokensPerSecond"] == 1100.0 and results["steadyStateTokensPerSecondCi95High"] > 1200.0
    assert conditions(fte)["Succeeded"]["reason"] == "RepeatsCompleted"
    assert conditions(fte)["MeasurementClean"]["status"] == "True"


def test_a_repeat_out_of_memory_makes_the_experiment_invalid(operator, kubelet, create_experiment):
    name = create_experiment(lora_spec(repeats=2))["metadata"]["name"]
    for repeat, make in enumerate((success_result, oom_result)):
        pod = kubelet.wait_pods(1, selector=f"ftbench.io/trial={repeat}")[0]
        kubelet.run(pod)
        kubelet.finish(pod, make(trial=repeat), exit_code=0)
    fte = kubelet.wait_phase(name, "Invalid")
    assert fte["status"]["isValid"] is False and fte["status"]["message"].startswith(
        "repeat 1 of 2: CUDA out of memory"
    )
    assert fte["status"]["repeats"]["finished"] == 2 and "results" not in fte["status"]


def test_child_deleted_by_hand_fails_and_is_not_recreated(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec())["metadata"]["name"]
    kubelet.wait_phase(name, "Pending")
    BatchV1Api(kube_api).delete_namespaced_job(f"{name}-a0", namespace, propagation_policy="Background")
    fte = kubelet.wait_phase(name, "Failed")
    assert conditions(fte)["Succeeded"]["reason"] == "ChildDeleted"
    time.sleep(1)
    assert not BatchV1Api(kube_api).list_namespaced_job(namespace).items


def test_spec_change_is_ignored_with_a_condition(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec())["metadata"]["name"]
    kubelet.wait_phase(name, "Pending")
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": {"batchSize": 8}}
    )
    fte = wait_for(
        lambda: "SpecChangeIgnored" in conditions(f := kubelet.experiment(name)) and f, what="SpecChangeIgnored"
    )
    ignored = conditions(fte)["SpecChangeIgnored"]
    assert ignored["status"] == "True" and ignored["reason"] == "SpecImmutable"
    assert fte["status"]["observedGeneration"] == fte["metadata"]["generation"] == 2
    jobs = BatchV1Api(kube_api).list_namespaced_job(namespace).items
    assert [j.metadata.name for j in jobs] == [f"{name}-a0"]
    kubelet.finish(kubelet.wait_pods(1)[0], success_result())
    assert kubelet.wait_phase(name, "Succeeded")["status"]["results"]


def test_deleting_the_experiment_garbage_collects_children(operator, kubelet, create_experiment, kube_api, namespace):
    name = create_experiment(lora_spec())["metadata"]["name"]
    kubelet.wait_pods(1)
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    batch, core = BatchV1Api(kube_api), CoreV1Api(kube_api)
    wait_for(
        lambda: (
            not batch.list_namespaced_job(namespace).items
            and not core.list_namespaced_config_map(namespace, label_selector="ftbench.io/experiment").items
        ),
        timeout=90,
        interval=1,
        what="children garbage-collected",
    )


def test_rejected_child_fails_without_retrying_forever(operator, kubelet, create_experiment, kube_api, namespace):
    CoreV1Api(kube_api).create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "no-jobs"}, "spec": {"hard": {"count/jobs.batch": "0"}}}
    )
    time.sleep(1)  # the quota controller fills status.used; admission needs it
    name = create_experiment(lora_spec())["metadata"]["name"]
    fte = kubelet.wait_phase(name, "Failed")
    assert conditions(fte)["Succeeded"]["reason"] == "ChildRejected" and "quota" in fte["status"]["message"]


def _with_network(result, outcome=None):
    """`result` whose environment carries a socket-fallback network preflight (tests/unit/nccl_logs shapes)."""
    sample = BandwidthSample(
        collective=Collective.ALL_REDUCE, size_bytes=128 << 20, seconds=0.12, alg_bandwidth_gbps=1.118,
        bus_bandwidth_gbps=1.118,
    )  # fmt: skip
    network = NetworkInEffect(
        backend="nccl", transport=NetworkTransport.SOCKET, devices=["eth0", "net1"],
        fallback="NET/IB : No device found.", nccl_version="2.21.5+cuda12.4", ranks=2, warmup_iterations=2,
        iterations=10, seconds=3.5, bandwidth=[sample], peak_bus_bandwidth_gbps=1.118,
    )  # fmt: skip
    env = (result.environment or RunEnvironment(engine="trl")).model_copy(update={"network": network})
    return result.model_copy(update={"environment": env, **({"outcome": outcome} if outcome else {})})


def test_the_network_preflight_reaches_status(operator, kubelet, create_experiment):
    """status.environment.network through the real API server (the CRD keeps every field) with its condition;
    a NetworkUnfit result (run.requireRoce) is Invalid with reason RoceNotInEffect."""
    name = create_experiment(lora_spec())["metadata"]["name"]
    kubelet.finish(kubelet.wait_pods(1)[0], _with_network(success_result()))
    fte = kubelet.wait_phase(name, "Succeeded")
    network = fte["status"]["environment"]["network"]
    assert network["transport"] == "socket" and network["fallback"] == "NET/IB : No device found."
    assert network["bandwidth"][0]["busBandwidthGbps"] == 1.118 and network["peakBusBandwidthGbps"] == 1.118
    cond = conditions(fte)["NetworkAsExpected"]  # one node, no enableRoce: sockets are what was asked for
    assert (cond["status"], cond["reason"]) == ("True", "AsExpected") and "nccl over socket" in cond["message"]
    namespace = fte["metadata"]["namespace"]
    series = (
        'ftbench_network_peak_bus_bandwidth_gbps{backend="nccl",experiment="finetune_lora_benchmark-v1.0.0",gpus="1",'
        f'link_layer="",model="llama3.1-8b",name="{name}",namespace="{namespace}",transport="socket"}} 1.118'
    )
    wait_for(lambda: series in operator.metrics(), 10, what="network metrics")

    name = create_experiment(lora_spec())["metadata"]["name"]
    unfit = _with_network(failed_result(), Outcome.NETWORK_UNFIT).model_copy(update={"reason": "RoceNotInEffect"})
    kubelet.finish(
        kubelet.wait_pods(1, selector=f"{EXPERIMENT_LABEL}={label_value(name)}")[0], unfit, EXIT_NETWORK_UNFIT
    )
    fte = kubelet.wait_phase(name, "Invalid")
    assert fte["status"]["isValid"] is False and conditions(fte)["Succeeded"]["reason"] == "RoceNotInEffect"
    assert fte["status"]["environment"]["network"]["transport"] == "socket"
