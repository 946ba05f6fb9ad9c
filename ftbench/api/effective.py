"""Values that depend on the experiment, the catalog or other fields, resolved in one place.

The spec keeps `None` for "the experiment's default"; everything downstream (rules, plan, docs)
asks these functions instead of repeating the defaulting logic.
"""

from __future__ import annotations

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, ExperimentEntry, ModelEntry
from ftbench.contracts.enums import (
    Device,
    DistributedBackend,
    Engine,
    FsdpBackwardPrefetch,
    FsdpShardingStrategy,
    FsdpStateDictType,
    NetworkPreflight,
    TorchDtype,
)
from ftbench.engines.releases import load_releases, stack_of

DEFAULT_LORA_R = 4
DEFAULT_LORA_ALPHA = 16
# fms-hf-tuning's own defaults (tuning/config/peft_config.py: LoraConfig.lora_dropout, PromptTuningConfig
# .num_virtual_tokens), which its command line leaves to it; the plan carries them so trl trains the same
# adapter and the memory predictor traces it.
DEFAULT_LORA_DROPOUT = 0.05
DEFAULT_PT_VIRTUAL_TOKENS = 8
DEFAULT_DATASET_TEXT_FIELD = "output"


def experiment_of(spec: FineTuneExperimentSpec, catalog: Catalog) -> ExperimentEntry:
    return catalog.experiments[spec.experiment]


def engine_stack(spec: FineTuneExperimentSpec) -> str:
    """The engine stack the run trains on (ftbench.engines.releases.stack_of): what the generated
    tables of optimizers and module names are keyed by."""
    return stack_of(spec.engine.value, spec.fms_hf_tuning_version)


def model_of(spec: FineTuneExperimentSpec, catalog: Catalog) -> ModelEntry | None:
    return catalog.models.get(spec.model)


def device(spec: FineTuneExperimentSpec) -> Device:
    """spec.device, else gpu when there are GPUs and cpu otherwise."""
    if spec.device is not None:
        return spec.device
    return Device.GPU if spec.number_gpus > 0 else Device.CPU


def uses_cpu(spec: FineTuneExperimentSpec) -> bool:
    return device(spec) == Device.CPU


def devices_per_node(spec: FineTuneExperimentSpec) -> int:
    """numberGpus / numberNodes: GPUs per node, or CPU ranks per node with device cpu."""
    return spec.number_gpus // spec.number_nodes


def gpus_per_node(spec: FineTuneExperimentSpec) -> int:
    """The GPUs a node's pod requests: none with device cpu (numberGpus then counts CPU ranks)."""
    return 0 if uses_cpu(spec) else devices_per_node(spec)


def processes_per_node(spec: FineTuneExperimentSpec) -> int:
    """One process per GPU (or per CPU rank with device cpu); a CPU node with 0 GPUs and
    distributedBackend None (one DataParallel process over the node's GPUs) run one process."""
    if spec.distributed_backend == DistributedBackend.NONE:
        return 1
    return max(1, devices_per_node(spec))


def world_size(spec: FineTuneExperimentSpec) -> int:
    return processes_per_node(spec) * spec.number_nodes


def devices_label(spec: FineTuneExperimentSpec) -> str:
    """What a run trains on, for tables and plots: `8 GPUs`, `2 CPU ranks` (device cpu: ranks stand in
    for GPUs and must not be called GPUs), `1 CPU rank` for numberGpus 0."""
    if uses_cpu(spec):
        ranks = world_size(spec)
        return f"{ranks} CPU rank" + ("s" if ranks > 1 else "")
    return f"{spec.number_gpus} GPU" + ("s" if spec.number_gpus > 1 else "")


def network_preflight(spec: FineTuneExperimentSpec) -> bool:
    """Whether the collective bandwidth self-test runs: spec.run.networkPreflight, auto meaning multi-node;
    never for a single rank (nothing to measure between ranks)."""
    if world_size(spec) < 2:
        return False
    setting = spec.run.network_preflight
    return setting in (NetworkPreflight.ON, NetworkPreflight.ONLY) or (
        setting == NetworkPreflight.AUTO and spec.number_nodes > 1
    )


def network_check_only(spec: FineTuneExperimentSpec) -> bool:
    """spec.run.networkPreflight only: the run is the network preflight, nothing is trained."""
    return spec.run.network_preflight == NetworkPreflight.ONLY


def per_device_batch_size(spec: FineTuneExperimentSpec) -> int:
    """Seed 001: batch_size is evenly distributed over max(1, number_gpus) devices.

    Multi-node CPU runs (0 GPUs) split the batch over their processes so the effective batch holds.
    """
    return max(1, spec.batch_size // max(spec.number_gpus, world_size(spec)))


def batch_devices(spec: FineTuneExperimentSpec) -> int:
    """The devices batchSize is split over: max(1, numberGpus), or the processes of a CPU run."""
    return max(spec.number_gpus, world_size(spec))


def global_batch_size(spec: FineTuneExperimentSpec) -> int:
    """Samples per optimizer step: per device x devices x gradientAccumulationSteps (ado's batch_size
    is one forward/backward pass over all devices; HF/TRL's global batch includes the accumulation)."""
    return per_device_batch_size(spec) * batch_devices(spec) * spec.gradient_accumulation_steps


def describe_batch(spec: FineTuneExperimentSpec) -> str:
    """The batch in words, for `ftbench validate` and `ftbench run`."""
    per, devices, steps = per_device_batch_size(spec), batch_devices(spec), spec.gradient_accumulation_steps
    return (
        f"{per} per device x {devices} device(s) x {steps} accumulation step(s) = {global_batch_size(spec)} "
        f"samples per optimizer step (batchSize {spec.batch_size} is ado's batch_size: one forward/backward "
        "pass over all devices)"
    )


def torch_dtype(spec: FineTuneExperimentSpec, catalog: Catalog) -> TorchDtype:
    return spec.torch_dtype or experiment_of(spec, catalog).default_torch_dtype


def distributed_backend(spec: FineTuneExperimentSpec) -> DistributedBackend | None:
    """None for one process (the seed runs tuning.sft_trainer directly, DataParallel over the
    node's GPUs when there are several); FSDP by default otherwise."""
    if world_size(spec) <= 1:
        return None
    return spec.distributed_backend or DistributedBackend.FSDP


# The sharding strategies FSDP2 expresses (reshard_after_forward True / False); the rest are FSDP1's.
FSDP2_STRATEGIES = (FsdpShardingStrategy.FULL_SHARD, FsdpShardingStrategy.SHARD_GRAD_OP)


def engine_fsdp_versions(spec: FineTuneExperimentSpec) -> tuple[int, ...]:
    """FSDP versions the engine's accelerate offers: trl's current stack has both; an fms-hf-tuning
    release what its lock's accelerate has (ftbench.engines.releases)."""
    if spec.engine == Engine.TRL:
        return (1, 2)
    return load_releases().get(spec.fms_hf_tuning_version).fsdp_versions


def fsdp1_only_settings(spec: FineTuneExperimentSpec) -> list[str]:
    """The spec's settings that only FSDP1 has, as `field value` phrases (empty: FSDP2 can run it)."""
    out = []
    if spec.fsdp_sharding_strategy not in FSDP2_STRATEGIES:
        out.append(f"fsdpShardingStrategy {spec.fsdp_sharding_strategy.value}")
    if spec.fsdp_forward_prefetch:
        out.append("fsdpForwardPrefetch true")
    if spec.fsdp_backward_prefetch is not None:
        out.append(f"fsdpBackwardPrefetch {spec.fsdp_backward_prefetch.value}")
    return out


def engine_fsdp2_full_state_dict(spec: FineTuneExperimentSpec) -> bool:
    """Whether the engine's accelerate runs FSDP2 with FULL_STATE_DICT (trl's current stack does)."""
    return spec.engine == Engine.TRL or load_releases().get(spec.fms_hf_tuning_version).fsdp2_full_state_dict


def fsdp_version(spec: FineTuneExperimentSpec) -> int:
    """spec.fsdpVersion, else 2 where the engine offers it with the spec's state dict type and no
    FSDP1-only setting is asked for."""
    if spec.fsdp_version is not None:
        return spec.fsdp_version
    full = spec.fsdp_state_dict_type == FsdpStateDictType.FULL_STATE_DICT
    if (
        2 in engine_fsdp_versions(spec)
        and not fsdp1_only_settings(spec)
        and not (full and not engine_fsdp2_full_state_dict(spec))
    ):
        return 2
    return 1


def fsdp_backward_prefetch(spec: FineTuneExperimentSpec) -> FsdpBackwardPrefetch | None:
    """FSDP1: the spec's value or seed 001's BACKWARD_PRE; FSDP2: None (it prefetches by itself)."""
    if fsdp_version(spec) == 2:
        return None
    return spec.fsdp_backward_prefetch or FsdpBackwardPrefetch.BACKWARD_PRE


def lora_r(spec: FineTuneExperimentSpec) -> int:
    return spec.r if spec.r is not None else DEFAULT_LORA_R


def lora_alpha(spec: FineTuneExperimentSpec) -> int:
    return spec.lora_alpha if spec.lora_alpha is not None else DEFAULT_LORA_ALPHA


def target_modules(spec: FineTuneExperimentSpec, catalog: Catalog) -> tuple[str, ...] | None:
    if spec.target_modules:
        return tuple(spec.target_modules)
    model = model_of(spec, catalog)
    return model.target_modules if model else None


def fsdp_layer_classes(spec: FineTuneExperimentSpec, catalog: Catalog) -> str | None:
    if spec.accelerate_config_fsdp_transformer_layer_cls_to_wrap:
        return spec.accelerate_config_fsdp_transformer_layer_cls_to_wrap
    model = model_of(spec, catalog)
    return model.layer_class if model else None


def max_steps(spec: FineTuneExperimentSpec, catalog: Catalog) -> int:
    fixed = experiment_of(spec, catalog).max_steps
    return fixed if fixed is not None else spec.max_steps


def trials(spec: FineTuneExperimentSpec, catalog: Catalog) -> int:
    """Runs of the same work one after another, each in a fresh process: the stability
    experiment's trials, or the spec's repeats (1 when unset)."""
    fixed = experiment_of(spec, catalog).trials
    return fixed if fixed > 1 else (spec.repeats or 1)


def is_repeated(spec: FineTuneExperimentSpec, catalog: Catalog) -> bool:
    """Several repeats whose outcomes decide the experiment's (the stability experiment's trials
    are its measurement instead: an OOM there is a counted outcome, not the result)."""
    return experiment_of(spec, catalog).trials == 1 and trials(spec, catalog) > 1


def precision_target(spec: FineTuneExperimentSpec) -> float | None:
    """spec.targetPrecisionPercent as the fraction the interval's half-width / estimate is held to."""
    return spec.target_precision_percent / 100 if spec.target_precision_percent else None


def dataset_text_field(spec: FineTuneExperimentSpec) -> str:
    return spec.dataset_text_field or DEFAULT_DATASET_TEXT_FIELD
