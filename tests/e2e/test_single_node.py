"""Single-node experiments end to end: success with progress, a trainer failure, stability trials."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from e2e_kit import Cluster, tiny_lora_spec

from ftbench.api.profile import ClusterProfile
from ftbench.contracts.enums import Engine

pytestmark = [pytest.mark.k8s, pytest.mark.training]


def test_lora_experiment_succeeds_with_progress_and_results(cluster: Cluster, ns: str) -> None:
    """kubectl apply -> Job -> trainer on the CPU -> Succeeded, progress seen while it ran."""
    # ~30 ms a step: 80 steps keep the run going for seconds after rank 0's first report (at
    # step 1; the next ones come every 10 s, and at the end).
    cluster.apply(ns, "lora", tiny_lora_spec(maxSteps=80))
    run = cluster.follow(ns, "lora", timeout=150)
    assert run.final["phase"] == "Succeeded", run.final
    assert run.final["isValid"] is True and run.final["results"]["trainTokensPerSecond"] > 0, run.final
    assert run.final["environment"]["device"] == "cpu"
    midway = [p for p in run.progress_while_running() if p["step"] < p["totalSteps"] == 80]
    assert midway, f"no progress seen mid-run: {run.seen}"
    assert run.final["progress"]["step"] == 80
    assert [j.metadata.name for j in cluster.batch.list_namespaced_job(ns).items] == ["lora-a0"]
    if cluster.images:  # the pod ran in the trainer image the profile names, as the profile's user
        assert run.final["environment"]["image"] == ClusterProfile().images.image_for(Engine.TRL, "")
        [spec] = cluster.container_specs(ns)
        assert spec["rootfs"] and spec["user"]["uid"] == ClusterProfile().security.run_as_user, spec


def test_trainer_failure_ends_failed_with_the_reason(cluster: Cluster, ns: str) -> None:
    """A spec that passes every rule but cannot run: the catalog's llama-7b weights are not on
    the models volume, so the trainer fails to load them and says so in its termination message."""
    cluster.apply(ns, "missing-weights", tiny_lora_spec(model="llama-7b"))
    run = cluster.follow(ns, "missing-weights", timeout=120)
    assert run.final["phase"] == "Failed", run.final
    succeeded = next(c for c in run.final["conditions"] if c["type"] == "Succeeded")
    assert succeeded["status"] == "False" and succeeded["reason"] not in ("", "Pending"), succeeded
    assert "LLaMa/models/hf/7B" in run.final["message"], run.final["message"]
    assert "results" not in run.final


def test_stability_experiment_records_five_trials(cluster: Cluster, ns: str) -> None:
    """No Indexed Jobs on 1.20: the operator runs the five trials as five Jobs, one after another."""
    # The experiment fixes most fields (5 trials of 5 steps, gradient checkpointing on): only the
    # ones it accepts are set, plus what every spec needs.
    base = tiny_lora_spec()
    spec = {k: base[k] for k in ("engine", "model", "datasetId", "modelMaxLength", "numberGpus", "batchSize")}
    spec.update(experiment="finetune_full_stability-v1.0.0", torchDtype="float32", gradientAccumulationSteps=1)
    cluster.apply(ns, "stability", spec)
    run = cluster.follow(ns, "stability", timeout=240)
    assert run.final["phase"] == "Succeeded", run.final
    stability = run.final["stability"]
    assert stability["trialsPlanned"] == stability["trialsFinished"] == 5, stability
    assert [t["index"] for t in stability["trials"]] == [0, 1, 2, 3, 4]
    assert [t["outcome"] for t in stability["trials"]] == ["Succeeded"] * 5 and stability["fNoError"] == 1.0
    jobs = sorted(j.metadata.name for j in cluster.batch.list_namespaced_job(ns).items)
    assert len(jobs) == 5, jobs


def test_fsdp_on_two_cpu_ranks_is_in_effect_on_the_cluster(cluster: Cluster, ns: str) -> None:
    """examples/fsdp-cpu.yaml applied as is: one pod runs two gloo ranks under FSDP2, and the status
    says so from the wrapped model, with each rank holding half of the parameters."""
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "fsdp-cpu.yaml").read_text())
    cluster.apply(ns, "fsdp-cpu", doc["spec"])
    run = cluster.follow(ns, "fsdp-cpu", timeout=240)
    assert run.final["phase"] == "Succeeded", run.final
    env, results = run.final["environment"], run.final["results"]
    assert env["distributedMode"] == "FSDP" and env["worldSize"] == 2 and env["device"] == "cpu"
    assert env["fsdp"]["version"] == 2 and env["fsdp"]["shardingStrategy"] == "FULL_SHARD"
    shares = [r["parameterBytes"] / results["modelParameterBytes"] for r in results["rankMemory"]]
    assert shares == pytest.approx([0.5, 0.5], rel=0.05)
