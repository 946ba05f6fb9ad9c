"""The test plays the kubelet (and the Kubeflow training operator): it writes pod status.

There is no kubelet on the test control plane, so pods the Job controller creates stay Pending
until these helpers write what a kubelet would: phase, start time and the trainer container's
state, with the trainer's real `TrainerResult` JSON as the termination message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from kubernetes.client import CoreV1Api, CustomObjectsApi

from ftbench.api.resource import GROUP, PLURAL, VERSION
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.results import EXIT_GPU_OOM, Metrics, Outcome, RunError, TrainerResult

A100 = "NVIDIA-A100-SXM4-80GB"
# What a 1.20 cluster supports (the operator would derive the same from the server version).
TEST_PROFILE = {"features": {"indexedJobs": False, "podFailurePolicy": False, "trainingOperator": False}}


def lora_spec(**extra: Any) -> dict[str, Any]:
    return {
        "experiment": "finetune_lora_benchmark-v1.0.0",
        "model": "llama3.1-8b",
        "modelMaxLength": 4096,
        "numberGpus": 1,
        "batchSize": 4,
        "gpuModel": A100,
        **extra,
    }


T = TypeVar("T")
SELECTOR = "app.kubernetes.io/managed-by=ftbench"


def wait_for(fn: Callable[[], T | None], timeout: float = 90.0, interval: float = 0.2, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = fn()
        except Exception as err:  # API hiccups while an object appears: keep waiting
            last = err
        else:
            last = value
            if value:
                return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or fn}: last={last!r}")


def ts(delta_seconds: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def success_result(trial: int | None = None, tokens_per_second: float = 1234.5) -> TrainerResult:
    metrics = Metrics(
        train_runtime_seconds=10.0,
        train_steps=5,
        train_samples=40,
        rows_offered=4096,
        rows_trained=1366,
        train_tokens=12345,
        train_non_padding_tokens=12000,
        train_samples_per_second=4.0,
        train_steps_per_second=0.5,
        train_tokens_per_second=tokens_per_second,
        train_tokens_per_gpu_per_second=tokens_per_second,
        steady_state_tokens_per_second=tokens_per_second,
        dataset_tokens_per_second=1000.0,
        dataset_tokens_per_second_per_gpu=1000.0,
        gpu_memory_utilization_peak_percent=87.5,
    )
    env = RunEnvironment(engine="trl", torch_version="2.5.0", device="cuda", gpu_name="NVIDIA A100")
    return TrainerResult(outcome=Outcome.SUCCEEDED, is_valid=True, metrics=metrics, environment=env, trial=trial)


def oom_result(trial: int | None = None) -> TrainerResult:
    return TrainerResult(
        outcome=Outcome.GPU_OOM,
        is_valid=False,
        reason="GpuOutOfMemory",
        error=RunError(type="torch.OutOfMemoryError", message="CUDA out of memory. Tried to allocate 2.00 GiB"),
        trial=trial,
    )


def failed_result(trial: int | None = None) -> TrainerResult:
    return TrainerResult(
        outcome=Outcome.FAILED, reason="TrainingError", error=RunError(type="ValueError", message="bad"), trial=trial
    )


class Kubelet:
    def __init__(self, api: Any, namespace: str) -> None:
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.namespace = namespace

    def pods(self, selector: str = SELECTOR) -> list[Any]:
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def wait_pods(self, count: int = 1, selector: str = SELECTOR, timeout: float = 90.0) -> list[Any]:
        return wait_for(
            lambda: (p := self.pods(selector)) and len(p) >= count and p, timeout, what=f"{count} pods {selector}"
        )

    def _container(self, pod: Any) -> str:
        return pod.spec.containers[0].name

    def write(self, pod: Any, phase: str, state: dict[str, Any], *, started: str | None = None, **extra: Any) -> None:
        status = {
            "phase": phase,
            "startTime": started or ts(),
            "containerStatuses": [
                {
                    "name": self._container(pod),
                    "image": pod.spec.containers[0].image,
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "state": state,
                }
            ],
            **extra,
        }
        self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, {"status": status})

    def run(self, pod: Any) -> None:
        self.write(pod, "Running", {"running": {"startedAt": ts()}})

    def terminate(self, pod: Any, exit_code: int, message: str = "", reason: str | None = None) -> None:
        term = {
            "exitCode": exit_code,
            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
            "message": message,
            "startedAt": ts(-10),
            "finishedAt": ts(),
        }
        self.write(pod, "Succeeded" if exit_code == 0 else "Failed", {"terminated": term})

    def finish(self, pod: Any, result: TrainerResult, exit_code: int | None = None) -> None:
        if exit_code is None:
            exit_code = {Outcome.SUCCEEDED: 0, Outcome.GPU_OOM: EXIT_GPU_OOM}.get(result.outcome, 1)
        self.terminate(pod, exit_code, result.to_termination_message())

    def experiment(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def wait_phase(self, name: str, phase: str, timeout: float = 90.0) -> dict[str, Any]:
        return wait_for(
            lambda: (fte := self.experiment(name)).get("status", {}).get("phase") == phase and fte,
            timeout,
            what=f"{name} phase {phase}",
        )
