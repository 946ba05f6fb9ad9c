"""Issue 12: the operator killed (SIGKILL) at random points during a burst of creates and deletes.

Bounded (about 60 s of chaos plus the wind-down): experiments are created and some deleted while
the operator is killed and restarted at random moments; then every pod is finished with a result
unique to its experiment. Asserted: no duplicate children (one Job per experiment and attempt),
no lost result (every surviving experiment Succeeded with its own numbers), no orphan (every
child left belongs to an experiment that still exists).
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from operator_testkit import SELECTOR, lora_spec, success_result, wait_for

from ftbench.api.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.k8s
CHAOS_SECONDS = 60.0


def test_random_kills_during_a_burst_lose_nothing_and_duplicate_nothing(
    operator, kubelet, create_experiment, kube_api, namespace
):
    rng = random.Random(12)
    custom, batch, core = CustomObjectsApi(kube_api), BatchV1Api(kube_api), CoreV1Api(kube_api)
    alive: dict[str, float] = {}
    deleted: set[str] = set()
    end = time.monotonic() + CHAOS_SECONDS
    i = 0
    try:
        while time.monotonic() < end and i < 24:
            name = f"burst-{i}"
            create_experiment(lora_spec(), name=name)
            alive[name] = 100.0 + i
            i += 1
            if rng.random() < 0.25 and len(alive) > 1:
                victim = rng.choice(sorted(alive))
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, victim)
                del alive[victim]
                deleted.add(victim)
            if rng.random() < 0.3:
                operator.kill()
                time.sleep(rng.uniform(0.0, 1.5))
                operator.start()
            time.sleep(rng.uniform(0.0, 1.0))
    finally:
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()

    jobs: dict[str, Any] = {}
    for name in sorted(alive):
        fte = kubelet.wait_phase(name, "Pending", timeout=90)
        jobs[name] = fte["status"]["job"]["name"]
    for name, job in jobs.items():
        pod = kubelet.wait_pods(1, f"job-name={job}", timeout=60)[0]
        kubelet.finish(pod, success_result(tokens_per_second=alive[name]))
    for name in sorted(alive):
        done = kubelet.wait_phase(name, "Succeeded", timeout=90)
        assert done["status"]["results"]["trainTokensPerSecond"] == alive[name], name

    listed = batch.list_namespaced_job(namespace, label_selector=SELECTOR).items
    live_jobs = [j for j in listed if not j.metadata.deletion_timestamp]
    per_experiment = sorted(j.metadata.labels["ftbench.io/experiment"] for j in live_jobs)
    assert len(per_experiment) == len(set(per_experiment)), per_experiment  # no duplicates

    def no_orphans() -> bool:
        children = [
            *batch.list_namespaced_job(namespace, label_selector=SELECTOR).items,
            *core.list_namespaced_config_map(namespace, label_selector=SELECTOR).items,
        ]
        owners = {ref.name for c in children for ref in c.metadata.owner_references or []}
        return owners <= set(alive)

    wait_for(no_orphans, timeout=90, interval=1.0, what="the garbage collector removes deleted experiments' children")
