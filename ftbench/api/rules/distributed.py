"""Rules of the distributed setup: CPU ranks (`device`) and the FSDP knobs.

Each names the field, the value, why it cannot run and what to change. FSDP2 (`fully_shard`) has
one strategy knob (reshard after forward: FULL_SHARD or SHARD_GRAD_OP) and no prefetch settings;
FSDP1's CPU offload computes on a GPU; HYBRID_SHARD shards within a node and replicates across
nodes, so it needs several. The rules with a CEL twin are enforced at `kubectl apply` as well.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily, cel_list
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import (
    AttentionImplementation,
    Device,
    DistributedBackend,
    Engine,
    FsdpShardingStrategy,
    FsdpStateDictType,
    NetworkPreflight,
)
from ftbench.engines.releases import load_releases, version_tuple

HYBRID = (FsdpShardingStrategy.HYBRID_SHARD, FsdpShardingStrategy.HYBRID_SHARD_ZERO2)


def distributed_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule(
        "run.require-roce",
        "run.requireRoce",
        "requireRoce needs a multi-node enableRoce run with the network preflight",
        "!has(self.run) || !has(self.run.requireRoce) || !self.run.requireRoce || (has(self.enableRoce) && "
        "self.enableRoce && has(self.numberNodes) && self.numberNodes >= 2 && (!has(self.run.networkPreflight) "
        "|| self.run.networkPreflight != 'off'))",
    )
    def require_roce_needs_preflight(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        run = s.run
        if not run.require_roce:
            return None
        if not s.enable_roce or s.number_nodes < 2:
            return (
                "run.requireRoce checks that NCCL uses RoCE between nodes, so it needs enableRoce true and "
                f"numberNodes >= 2 (enableRoce {str(s.enable_roce).lower()}, numberNodes {s.number_nodes}); set "
                "them, or remove requireRoce"
            )
        if run.network_preflight == NetworkPreflight.OFF:
            return (
                "run.requireRoce is decided by the network preflight, but run.networkPreflight is off; set it to "
                "auto or on, or remove requireRoce"
            )
        return None

    @family.rule(
        "run.network-check-only", "run.networkPreflight", "networkPreflight only needs several ranks and one run"
    )
    def network_check_only(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        if not effective.network_check_only(s):
            return None
        if effective.world_size(s) < 2:
            return (
                "run.networkPreflight only measures collectives between ranks, but this run has one rank; ask for "
                "the ranks to check (numberGpus, numberNodes; device cpu for CPU ranks)"
            )
        if effective.trials(s, c) > 1:
            return (
                "run.networkPreflight only runs the preflight once; set repeats to 1 and a non-stability "
                "experiment (create one experiment per check)"
            )
        return None

    @family.rule(
        "device.gpu-needs-gpus",
        "device",
        "device gpu needs at least one GPU",
        "!has(self.device) || self.device != 'gpu' || self.numberGpus > 0",
    )
    def gpu_needs_gpus(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.device != Device.GPU or s.number_gpus > 0:
            return None
        return "device gpu needs numberGpus >= 1; set numberGpus, or device cpu (or remove device) to run on CPU"

    @family.rule(
        "attention.flash-needs-gpu",
        "attentionImplementation",
        "flash_attention_2 needs GPUs",
        "!has(self.attentionImplementation) || self.attentionImplementation != 'flash_attention_2' || "
        "(self.numberGpus > 0 && (!has(self.device) || self.device != 'cpu'))",
    )
    def flash_needs_gpu(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.attention_implementation != AttentionImplementation.FLASH_ATTENTION_2 or not effective.uses_cpu(s):
            return None
        return (
            "attentionImplementation flash_attention_2 runs flash-attn's CUDA kernels, which need a GPU, but this "
            "experiment trains on CPU (numberGpus 0 or device cpu); set attentionImplementation to sdpa, eager or "
            "auto, or run on GPUs"
        )

    @family.rule(
        "device.cpu-backend",
        "distributedBackend",
        "CPU ranks run FSDP or DDP, not DataParallel",
        "!has(self.device) || self.device != 'cpu' || self.numberGpus <= 1 || !has(self.distributedBackend) "
        "|| self.distributedBackend != 'None'",
    )
    def data_parallel_needs_gpus(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not (s.device == Device.CPU and s.number_gpus > 1 and s.distributed_backend == DistributedBackend.NONE):
            return None
        return (
            f"distributedBackend None is one process driving the node's GPUs (DataParallel), which CPU ranks do not "
            f"have; with device cpu and numberGpus {s.number_gpus} set distributedBackend FSDP or DDP"
        )

    @family.rule(
        "fsdp.hybrid-multi-node",
        "fsdpShardingStrategy",
        "HYBRID_SHARD needs several nodes",
        f"!(self.fsdpShardingStrategy in {cel_list([h.value for h in HYBRID])}) || self.numberNodes > 1",
    )
    def hybrid_multi_node(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.fsdp_sharding_strategy not in HYBRID or s.number_nodes > 1:
            return None
        return (
            f"fsdpShardingStrategy {s.fsdp_sharding_strategy.value} shards within a node and replicates across "
            "nodes, but numberNodes is 1; use FULL_SHARD (or SHARD_GRAD_OP) on one node, or numberNodes >= 2"
        )

    strategies2 = cel_list([s.value for s in effective.FSDP2_STRATEGIES])

    @family.rule(
        "fsdp.v2-settings",
        "fsdpVersion",
        "FSDP2 takes only FULL_SHARD or SHARD_GRAD_OP and no prefetch settings",
        "!has(self.fsdpVersion) || self.fsdpVersion != 2 || (self.fsdpShardingStrategy in "
        + strategies2
        + " && !self.fsdpForwardPrefetch && !has(self.fsdpBackwardPrefetch))",
    )
    def v2_settings(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.fsdp_version != 2:
            return None
        fsdp1 = effective.fsdp1_only_settings(s)
        if not fsdp1:
            return None
        return (
            f"fsdpVersion 2 (fully_shard) has no {', '.join(fsdp1)}: FSDP2's strategies are FULL_SHARD and "
            "SHARD_GRAD_OP and it prefetches by itself; set fsdpVersion 1 or remove them"
        )

    without2 = [r.version for r in load_releases().installable if 2 not in r.fsdp_versions]
    with2 = [r for r in load_releases().installable if 2 in r.fsdp_versions]
    oldest_any = min(with2, key=lambda r: version_tuple(r.version)).version
    oldest_full = min((r for r in with2 if r.fsdp2_full_state_dict), key=lambda r: version_tuple(r.version)).version

    @family.rule(
        "fsdp.v2-engine",
        "fsdpVersion",
        "FSDP2 needs an engine whose accelerate has it",
        "!has(self.fsdpVersion) || self.fsdpVersion != 2 || self.engine != 'fms-hf-tuning' || "
        f"!(self.fmsHfTuningVersion in {cel_list(without2)})",
    )
    def v2_engine(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.fsdp_version != 2 or s.engine != Engine.FMS_HF_TUNING or s.fms_hf_tuning_version not in without2:
            return None
        # The release to name is one that then runs this spec's state dict type too (fsdp.v2-state-dict).
        oldest = oldest_any if s.fsdp_state_dict_type == FsdpStateDictType.SHARDED_STATE_DICT else oldest_full
        return (
            f"fsdpVersion 2 needs accelerate >= 1.6, but fms-hf-tuning {s.fms_hf_tuning_version} pins an older "
            f"accelerate; set fsdpVersion 1 (or remove it), fmsHfTuningVersion {oldest} or newer, or engine trl"
        )

    sharded_only = [
        r.version for r in load_releases().installable if 2 in r.fsdp_versions and not r.fsdp2_full_state_dict
    ]

    @family.rule(
        "fsdp.v2-state-dict",
        "fsdpStateDictType",
        "FSDP2 on an accelerate without FULL_STATE_DICT for it needs SHARDED_STATE_DICT",
        "!has(self.fsdpVersion) || self.fsdpVersion != 2 || self.fsdpStateDictType != 'FULL_STATE_DICT' || "
        f"self.engine != 'fms-hf-tuning' || !(self.fmsHfTuningVersion in {cel_list(sharded_only)})",
    )
    def v2_full_state_dict(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if (
            s.fsdp_version != 2
            or s.fsdp_state_dict_type != FsdpStateDictType.FULL_STATE_DICT
            or s.engine != Engine.FMS_HF_TUNING
            or s.fms_hf_tuning_version not in sharded_only
        ):
            return None
        return (
            f"fms-hf-tuning {s.fms_hf_tuning_version}'s accelerate runs FSDP2 only with SHARDED_STATE_DICT; set "
            "fsdpStateDictType SHARDED_STATE_DICT, fsdpVersion 1 (or remove it), or a newer fmsHfTuningVersion"
        )

    @family.rule("fsdp.offload-fsdp1-cpu", "fsdpOffloadParams", "FSDP1 offload needs GPUs")
    def offload_fsdp1_cpu(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not (s.fsdp_offload_params and effective.uses_cpu(s) and effective.fsdp_version(s) == 1):
            return None
        return (
            "fsdpOffloadParams with FSDP1 moves each shard to a GPU to compute, which CPU ranks do not have; "
            "use FSDP2 (fsdpVersion 2 or unset, on an engine that has it) or set fsdpOffloadParams false"
        )

    return iter(family.rules)
