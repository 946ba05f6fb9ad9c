"""Rules for options a run would accept but not apply where it runs.

A spec is the record of what was measured (`status.acceptedSpec`): a field that is accepted and
recorded but has no effect makes that record wrong. Each option below acts only under some
condition (a launcher, a backend, a GPU, a second node, a package the images lack); outside it
the spec is refused with why and what to change, so what the status records was in effect.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.rules.rule import Rule, RuleFamily
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog, DatasetEntry
from ftbench.contracts.enums import DistributedBackend, Engine, MixedPrecision
from ftbench.engines.releases import DEFAULT_FMS_HF_TUNING_VERSION

_FSDP_FIELDS = {
    "fsdp_sharding_strategy": "fsdpShardingStrategy",
    "fsdp_state_dict_type": "fsdpStateDictType",
    "fsdp_use_orig_params": "fsdpUseOrigParams",
    "fsdp_version": "fsdpVersion",
    "fsdp_offload_params": "fsdpOffloadParams",
    "fsdp_forward_prefetch": "fsdpForwardPrefetch",
    "fsdp_backward_prefetch": "fsdpBackwardPrefetch",
    "accelerate_config_fsdp_transformer_layer_cls_to_wrap": "accelerateConfigFsdpTransformerLayerClsToWrap",
}


def applied_rules() -> Iterator[Rule]:
    family = RuleFamily()

    @family.rule("applied.fp8", "accelerateConfigMixedPrecision", "fp8 mixed precision is not available")
    def fp8(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.accelerate_config_mixed_precision != MixedPrecision.FP8:
            return None
        return (
            "accelerateConfigMixedPrecision fp8 needs GPUs with fp8 tensor cores (compute capability >= 8.9: "
            "H100, H200, L40S, B200) and NVIDIA transformer-engine in the trainer image, which ftbench's images "
            "do not include, so it would not be applied; use bf16 (or fp16)"
        )

    @family.rule(
        "applied.mixed-precision-launcher",
        "accelerateConfigMixedPrecision",
        "accelerateConfigMixedPrecision needs a run launched by accelerate (several processes)",
    )
    def mixed_precision_launcher(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        value = s.accelerate_config_mixed_precision
        if value == MixedPrecision.NO or effective.distributed_backend(s) is not None:
            return None
        return (
            f"accelerateConfigMixedPrecision {value.value} is a setting of accelerate launch, but this run is one "
            f"process (numberGpus {s.number_gpus} on one node) and starts without accelerate, so it would not be "
            "applied; remove it (set bf16: true for bf16 mixed precision in a single process)"
        )

    @family.rule("applied.fp16-gpu", "accelerateConfigMixedPrecision", "fp16 mixed precision needs GPUs")
    def fp16_on_cpu(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not effective.uses_cpu(s) or s.accelerate_config_mixed_precision != MixedPrecision.FP16:
            return None
        return (
            "accelerateConfigMixedPrecision fp16 needs GPUs (CPU autocast is bf16 only), and this run trains on CPU "
            f"(numberGpus {s.number_gpus}, device cpu); use bf16 or no, or device gpu"
        )

    @family.rule("applied.fsdp-settings", "distributedBackend", "FSDP settings need the FSDP backend")
    def fsdp_settings(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        backend = effective.distributed_backend(s)
        if backend == DistributedBackend.FSDP:
            return None
        changed = [
            alias
            for name, alias in _FSDP_FIELDS.items()
            if getattr(s, name) != FineTuneExperimentSpec.model_fields[name].get_default(call_default_factory=True)
        ]
        if not changed:
            return None
        runs = backend.value if backend is not None else "one process"
        return (
            f"{', '.join(changed)} configure FSDP, but this run uses {runs}, so they would not be applied; "
            "remove them, or run FSDP (distributedBackend FSDP with numberGpus > 1)"
        )

    @family.rule(
        "applied.backend-one-process",
        "distributedBackend",
        "a distributed backend needs several processes",
        cel="!has(self.distributedBackend) || self.distributedBackend == 'None' || self.numberNodes > 1 "
        "|| self.numberGpus > 1",
    )
    def backend_one_process(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        backend = s.distributed_backend
        if backend in (None, DistributedBackend.NONE) or effective.world_size(s) > 1:
            return None
        return (
            f"distributedBackend {backend.value} shards or replicates a model across processes, but this run is one "
            f"process (numberGpus {s.number_gpus} on one node), so it would not be applied; remove it, or set "
            "numberGpus to 2 or more"
        )

    @family.rule(
        "applied.fms-release-trl",
        "fmsHfTuningVersion",
        "fmsHfTuningVersion needs engine fms-hf-tuning",
        cel=f"self.engine != 'trl' || self.fmsHfTuningVersion == '{DEFAULT_FMS_HF_TUNING_VERSION}'",
    )
    def fms_release_with_trl(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.engine != Engine.TRL or s.fms_hf_tuning_version == DEFAULT_FMS_HF_TUNING_VERSION:
            return None
        return (
            f"fmsHfTuningVersion {s.fms_hf_tuning_version} chooses the fms-hf-tuning release, but engine trl runs "
            "current trl, so it would not be applied; remove it, or set engine fms-hf-tuning"
        )

    @family.rule(
        "applied.gpu-model-no-gpu",
        "gpuModel",
        "gpuModel needs GPUs",
        cel="self.numberGpus > 0 || !has(self.gpuModel) || self.gpuModel == ''",
    )
    def gpu_model_without_gpus(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.number_gpus > 0 or not s.gpu_model:
            return None
        return (
            f"gpuModel {s.gpu_model} picks the nodes' GPU model, but numberGpus is 0 (a CPU run), so it would not "
            "be applied; remove it, or set numberGpus"
        )

    @family.rule(
        "applied.precision-conflict",
        "bf16",
        "bf16 and fp16 mixed precision cannot both be on",
        cel="!(self.bf16 && self.accelerateConfigMixedPrecision == 'fp16')",
    )
    def precision_conflict(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if not (s.bf16 and s.accelerate_config_mixed_precision == MixedPrecision.FP16):
            return None
        return (
            "bf16 true asks the Trainer for bf16 mixed precision and accelerateConfigMixedPrecision fp16 asks "
            "accelerate for fp16: one run has one; keep bf16 (accelerateConfigMixedPrecision bf16 or no) or fp16 "
            "(bf16 false)"
        )

    @family.rule(
        "applied.reentrant",
        "gradientCheckpointingUseReentrant",
        "gradientCheckpointingUseReentrant needs gradientCheckpointing",
    )
    def reentrant(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        if s.gradient_checkpointing or not s.gradient_checkpointing_use_reentrant:
            return None
        return (
            "gradientCheckpointingUseReentrant true chooses how gradient checkpointing runs, but "
            "gradientCheckpointing is false; remove it or set gradientCheckpointing true"
        )

    @family.dataset_rule("applied.image-field", "datasetImageField", "datasetImageField needs a vision dataset")
    def image_field(s: FineTuneExperimentSpec, dataset: DatasetEntry) -> str | None:
        if s.dataset_image_field is None or dataset.kind == "vision":
            return None
        return (
            f"datasetImageField {s.dataset_image_field} names an image column, but {s.dataset_id} is a text "
            "dataset; remove it, or use a vision-* dataset with a vision model"
        )

    @family.rule("applied.gpu-kernels", "numberGpus", "fastKernels and fastMoe need GPUs")
    def gpu_kernels(s: FineTuneExperimentSpec, _: Catalog) -> str | None:
        kernels = s.fast_kernels is not None and any(s.fast_kernels)
        if not effective.uses_cpu(s) or not (kernels or s.fast_moe):
            return None
        return (
            "fastKernels and fastMoe are fms-acceleration GPU kernels (triton), and this run trains on CPU "
            f"(numberGpus {s.number_gpus}, device cpu); remove them or run on GPUs"
        )

    return iter(family.rules)
