"""CPU ranks and the FSDP knobs in the API: each refusal names field, value and fix; the plan and the
pods say what runs (FSDP version per engine, the accelerate config keys, CPUs instead of GPUs)."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.runtime_choice import preferred_runtime
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.contracts.plan import ExperimentRef
from ftbench.render.manifests import render_experiment
from ftbench.render.plan import build_plan

BASE: dict[str, Any] = {"experiment": "finetune_lora_benchmark-v1.0.0", "engine": "trl", "model": "llama3.1-8b",
                        "modelMaxLength": 1024, "numberGpus": 2, "batchSize": 4,
                        "gpuModel": "NVIDIA-A100-SXM4-80GB", "distributedBackend": "FSDP"}  # fmt: skip


def rules(extra: dict[str, Any]) -> dict[str, Any]:
    return {i.rule: i for i in validate_spec_dict({**BASE, **extra}).issues}


@pytest.mark.parametrize(
    ("extra", "rule", "fix"),
    [
        ({"device": "gpu", "numberGpus": 0, "distributedBackend": None}, "device.gpu-needs-gpus", "device cpu"),
        ({"device": "cpu", "distributedBackend": "None"}, "device.cpu-backend", "FSDP or DDP"),
        ({"fsdpShardingStrategy": "HYBRID_SHARD"}, "fsdp.hybrid-multi-node", "numberNodes >= 2"),
        ({"fsdpVersion": 2, "fsdpShardingStrategy": "NO_SHARD"}, "fsdp.v2-settings", "fsdpVersion 1"),
        ({"fsdpVersion": 2, "fsdpForwardPrefetch": True}, "fsdp.v2-settings", "fsdpVersion 1"),
        ({"fsdpVersion": 2, "fsdpBackwardPrefetch": "BACKWARD_POST"}, "fsdp.v2-settings", "fsdpVersion 1"),
        ({"engine": "fms-hf-tuning", "fmsHfTuningVersion": "2.1.2", "fsdpVersion": 2}, "fsdp.v2-engine", "3.1.0 or newer"),
        ({"device": "cpu", "fsdpVersion": 1, "fsdpOffloadParams": True}, "fsdp.offload-fsdp1-cpu", "fsdpVersion 2"),
        ({"engine": "fms-hf-tuning", "fmsHfTuningVersion": "3.0.0", "fsdpVersion": 2}, "fsdp.v2-state-dict",
         "fsdpStateDictType SHARDED_STATE_DICT"),
        ({"device": "cpu", "engine": "fms-hf-tuning", "fmsHfTuningVersion": "2.1.2", "fsdpOffloadParams": True},
         "fsdp.offload-fsdp1-cpu", "fsdpVersion 2"),
    ],
)  # fmt: skip
def test_each_impossible_setting_is_refused_with_the_fix(extra: dict[str, Any], rule: str, fix: str) -> None:
    found = rules(extra)
    assert rule in found, list(found)
    assert fix in found[rule].message


@pytest.mark.parametrize(
    "extra",
    [
        {"device": "cpu"},
        {"device": "cpu", "fsdpOffloadParams": True},
        {"fsdpShardingStrategy": "SHARD_GRAD_OP", "fsdpVersion": 2},
        {"fsdpShardingStrategy": "NO_SHARD"},
        {"fsdpShardingStrategy": "HYBRID_SHARD", "numberGpus": 4, "numberNodes": 2},
        {"fsdpVersion": 1, "fsdpForwardPrefetch": True, "fsdpBackwardPrefetch": "BACKWARD_POST"},
    ],
)
def test_the_possible_neighbours_pass(extra: dict[str, Any]) -> None:
    assert validate_spec_dict({**BASE, **extra}).ok, rules(extra)


def _plan(**extra: Any):  # type: ignore[no-untyped-def]
    spec = FineTuneExperimentSpec.model_validate({**BASE, **extra})
    catalog, profile = load_catalog(), ClusterProfile()
    return build_plan(
        spec, catalog, profile, ref=ExperimentRef(name="x"), runtime=preferred_runtime(spec, catalog, profile).runtime
    )


def test_fsdp2_config_where_the_engine_has_it_fsdp1_otherwise() -> None:
    two = _plan(device="cpu")
    assert two.use_cpu and two.topology.world_size == 2 and two.topology.number_gpus == 0
    assert two.fsdp is not None and two.fsdp.version == 2
    config = (two.accelerate_config or {})["fsdp_config"]
    assert config["fsdp_version"] == 2 and config["fsdp_reshard_after_forward"] is True
    assert "fsdp_backward_prefetch" not in config and "fsdp_sharding_strategy" not in config
    assert (
        _plan(fsdpShardingStrategy="SHARD_GRAD_OP").accelerate_config["fsdp_config"]["fsdp_reshard_after_forward"]
        is False
    )  # type: ignore[index]
    one = _plan(engine="fms-hf-tuning", fmsHfTuningVersion="2.1.2")
    assert one.fsdp is not None and one.fsdp.version == 1 and one.fsdp.backward_prefetch == "BACKWARD_PRE"
    config1 = (one.accelerate_config or {})["fsdp_config"]
    assert "fsdp_version" not in config1 and config1["fsdp_sharding_strategy"] == "FULL_SHARD"
    # fms-hf-tuning 3.0.0's accelerate 1.6 runs FSDP2 with SHARDED_STATE_DICT only: FSDP1 for the default FULL
    assert _plan(engine="fms-hf-tuning", fmsHfTuningVersion="3.0.0").fsdp.version == 1  # type: ignore[union-attr]
    sharded = _plan(engine="fms-hf-tuning", fmsHfTuningVersion="3.0.0", fsdpStateDictType="SHARDED_STATE_DICT")
    assert sharded.fsdp.version == 2  # type: ignore[union-attr]
    assert _plan(engine="fms-hf-tuning", fmsHfTuningVersion="3.1.0").fsdp.version == 2  # type: ignore[union-attr]
    knobs = _plan(fsdpShardingStrategy="NO_SHARD", fsdpForwardPrefetch=True, fsdpOffloadParams=True)
    k = (knobs.accelerate_config or {})["fsdp_config"]
    assert knobs.fsdp.version == 1 and k["fsdp_forward_prefetch"] and k["fsdp_offload_params"]  # type: ignore[union-attr]


def test_cpu_ranks_request_cpus_not_gpus() -> None:
    spec = FineTuneExperimentSpec.model_validate({**BASE, "device": "cpu", "numberGpus": 4, "batchSize": 8})
    profile = ClusterProfile.model_validate({"cpuPerCpuRank": 3})
    rendered = render_experiment(spec, load_catalog(), profile, name="cpu-ranks")
    pods = [o for o in rendered.objects if o["kind"] in ("Job",)]
    container = pods[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "12"
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert (
        "nodeSelector" not in pods[0]["spec"]["template"]["spec"]
        or "nvidia.com/gpu.product" not in pods[0]["spec"]["template"]["spec"]["nodeSelector"]
    )
    gpu = render_experiment(spec.model_copy(update={"device": None}), load_catalog(), profile, name="gpus")
    gpu_container = next(o for o in gpu.objects if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    assert gpu_container["resources"]["requests"]["nvidia.com/gpu"] == "4"
