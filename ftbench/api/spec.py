"""`FineTuneExperiment.spec`: every parameter of seed 001's experiments, camelCase on the wire.

The field names are the seed's parameter names in camelCase (`batch_size` -> `batchSize`), except
`model_name` which is `model`; docs/reference/crd.md lists the mapping. Parameters whose default
depends on the experiment (`torchDtype`, `distributedBackend`, `r`, `loraAlpha`) have no static
default: `None` means "the experiment's default", resolved in `ftbench.api.effective`. This keeps
the CRD able to tell "not set" from "set to the default", which experiment rules need.

Field descriptions are the user documentation: the CRD generator copies them, so
`kubectl explain fte.spec.<field>` prints them. `spec.run` (how it runs on Kubernetes) is
ftbench.api.run_settings; the patterns and bounds the fields are held to, ftbench.api.bounds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from ftbench.api.api_model import ApiModel
from ftbench.api.bounds import (
    CATALOG_KEY,
    LABEL_VALUE,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_GPUS,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_TARGET_MODULES,
    Identifier,
)
from ftbench.api.run_settings import RunSettings
from ftbench.contracts.enums import (
    EXPERIMENT_ALIASES,
    OPTIMIZERS,
    AttentionImplementation,
    AutoStopMethod,
    DeepSpeedOffload,
    Device,
    DistributedBackend,
    Engine,
    Experiment,
    FsdpBackwardPrefetch,
    FsdpShardingStrategy,
    FsdpStateDictType,
    MixedPrecision,
    TorchDtype,
    canonical_experiment,
)
from ftbench.engines.releases import DEFAULT_FMS_HF_TUNING_VERSION, FMS_HF_TUNING_VERSIONS

Optimizer = Literal[OPTIMIZERS]  # type: ignore[valid-type]
FmsHfTuningVersion = Literal[FMS_HF_TUNING_VERSIONS]  # type: ignore[valid-type]
# ado's code registers "finetune_gptq-lora_benchmark-v1.0.0" where the seed writes "gtpq": both are
# accepted (the CRD enum lists both) and the spec keeps the canonical (seed) spelling.
ExperimentName = Annotated[
    Experiment,
    BeforeValidator(canonical_experiment),
    WithJsonSchema({"type": "string", "enum": [*(e.value for e in Experiment), *EXPERIMENT_ALIASES]}),
]


class FineTuneExperimentSpec(ApiModel):
    """What to measure. Immutable once created: the spec is the record of what was measured."""

    experiment: ExperimentName = Field(
        default=Experiment.FULL,
        description="Which experiment to run (seed 001): full fine-tuning, its 5-trial stability variant, "
        "LoRA, GPTQ-LoRA or prompt tuning. GPTQ-LoRA is spelled as the seed (gtpq) or as ado's code "
        "registers it (finetune_gptq-lora_benchmark-v1.0.0); the status shows the seed's spelling.",
    )
    engine: Engine = Field(
        default=Engine.FMS_HF_TUNING,
        description="Training library: fms-hf-tuning (as the SFTTrainer actuator) or trl (current trl "
        "SFTTrainer directly). Both report the same measured properties.",
    )

    # ---- required parameters (seed 001 "Required") ----
    model: Annotated[str, Field(min_length=1, max_length=253, pattern=CATALOG_KEY)] = Field(
        description="Model name from the model catalog (`ftbench catalog models`), seed parameter model_name."
    )
    model_max_length: Annotated[int, Field(ge=1, le=1_048_576)] = Field(
        description="Maximum sequence length (tokens). Sequences are right padded and possibly truncated. "
        "Seed parameter model_max_length; passed as --max_seq_length."
    )
    number_gpus: Annotated[int, Field(ge=0, le=MAX_GPUS)] = Field(
        description="The effective number of GPUs, evenly distributed over numberNodes machines: one training "
        "process (rank) per GPU. With device cpu it is the number of CPU ranks instead (processes on the "
        "CPU, gloo between them). 0 runs one process on CPU. Seed parameter number_gpus."
    )
    device: Device | None = Field(
        default=None,
        description="What each rank trains on: gpu, or cpu to run the same plan (same ranks, batch split, "
        "FSDP/DDP settings) as numberGpus CPU processes with gloo, requesting CPUs instead of GPUs "
        "(cluster profile cpuPerCpuRank each). Change cpu to gpu to run the same spec on GPUs. An ftbench "
        "extension. Unset: gpu when numberGpus > 0, else cpu.",
    )
    batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH)] = Field(
        description="Samples per forward/backward pass over all devices (ado's batch_size), evenly distributed "
        "over max(1, numberGpus) devices: each gets batchSize / max(1, numberGpus) (HF/TRL's "
        "per_device_train_batch_size). One optimizer step accumulates gradientAccumulationSteps passes, so it sees "
        "batchSize x gradientAccumulationSteps samples (the global batch; status.batch records all three). "
        "Seed parameter batch_size."
    )
    gpu_model: Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)] | None = Field(
        default=None,
        description="Value of the GPU product node label (nvidia.com/gpu.product by default), e.g. "
        "NVIDIA-A100-SXM4-80GB: a label value (at most 63 letters, digits, '-', '_', '.'). Required when "
        "numberGpus > 0. Seed parameter gpu_model.",
    )

    # ---- optional parameters (seed 001 "Optional"), with the seed's defaults ----
    dataset_id: Annotated[str, Field(max_length=253, pattern=CATALOG_KEY)] = Field(
        default="news-tokens-16384plus-entries-4096",
        description="Dataset from the dataset catalog (`ftbench catalog datasets`). Seed parameter dataset_id.",
    )
    gradient_checkpointing: bool = Field(
        default=True,
        description="Use gradient checkpointing: saves memory (bigger batches) at the cost of a slower backward pass.",
    )
    attention_implementation: AttentionImplementation = Field(
        default=AttentionImplementation.AUTO,
        description="transformers' attn_implementation the model is loaded with: eager (plain PyTorch "
        "attention), sdpa (torch.nn.functional.scaled_dot_product_attention) or flash_attention_2 (the "
        "flash-attn package's CUDA kernels: GPU only, and only where the cluster profile's images carry "
        "flash-attn). auto: flash_attention_2 on GPUs where the images carry flash-attn (for ftbench run and "
        "ftbench sweep: where the interpreter that trains can import flash_attn), else sdpa. The one "
        "in effect, read from the loaded model, is in status.environment.attentionImplementation. With "
        "engine fms-hf-tuning, eager needs a release with --flash_attn_implementation (3.1.0 or later).",
    )
    packing: bool = Field(
        default=False,
        description="Pack several samples into each row (trl's best-fit-decreasing packing, padding-free): no "
        "padding tokens are trained, and each sample attends only to itself (the samples' position ids restart "
        "at 0; transformers masks each sample on sdpa and eager, flash attention's varlen kernels split them on "
        "flash_attention_2). status.environment.packing says which isolation ran; status.results counts samples "
        "and real tokens. Engine trl only; not with prompt tuning.",
    )
    liger_kernel: bool = Field(
        default=False,
        description="Patch the model with Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear cross-entropy; "
        "trl's use_liger_kernel). GPU only (Triton kernels), and engine trl only (the trl image installs "
        "liger-kernel); status.environment.ligerKernel says whether the trained model ran them.",
    )
    gradient_accumulation_steps: Annotated[int, Field(ge=1, le=MAX_BATCH)] = Field(
        default=4,
        description="Forward/backward passes accumulated per optimizer step (HF's gradient_accumulation_steps). "
        "Default 4, ado's default: the global batch is then 4 x batchSize; set 1 to make batchSize the global batch.",
    )
    torch_dtype: TorchDtype | None = Field(
        default=None,
        description="dtype the model weights are loaded in. Unset: the experiment's default (bfloat16; "
        "float16 for GPTQ-LoRA, which allows nothing else).",
    )
    max_steps: Annotated[int, Field(ge=-1, le=MAX_STEPS)] = Field(
        default=-1,
        description="Number of optimization steps to run; -1 runs numTrainEpochs instead.",
    )
    num_train_epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS)] = Field(
        default=1.0, description="How many epochs to run. Ignored when maxSteps > 0."
    )
    stop_after_seconds: Annotated[float, Field(ge=-1, le=MAX_SECONDS)] = Field(
        default=-1.0,
        description="Stop after this many seconds of training (checked at the end of each step; all ranks "
        "stop on the same step). -1 or 0: no time limit.",
    )
    auto_stop_method: AutoStopMethod | None = Field(
        default=None,
        description="WARMUP_60S_STABLE_120S_OR_10_STEPS stops after >= 60 s of warmup plus the longer of "
        "120 s or 10 optimization steps, and excludes the warmup from throughput and system metrics. "
        "Unset: no automatic stop.",
    )
    target_precision_percent: Annotated[float, Field(gt=0, le=50)] | None = Field(
        default=None,
        description="Measure just long enough: stop once the steady-state tokens/s 95% interval (batch means over "
        "the steady steps, valid for correlated steps) is at most +- this percent, after precisionMinSteps steady "
        "steps and precisionMinSeconds; maxSteps, numTrainEpochs, stopAfterSeconds and autoStopMethod stay the "
        "budget (status.results.stoppedBy says which ended the run: precisionTarget when this did). A within-run "
        "interval covers one process's speed only, so with repeats > 1 the repeats also stop once the interval "
        "across the finished ones (2 or more) is this tight (status.repeats.stoppedBy). Unset: no precision stop.",
    )
    precision_min_steps: Annotated[int, Field(ge=4, le=MAX_STEPS)] = Field(
        default=20,
        description="targetPrecisionPercent: steady steps measured before the interval may stop the run (a lucky "
        "short stretch can look tight; 20 steps give 5 batch means).",
    )
    precision_min_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = Field(
        default=30.0,
        description="targetPrecisionPercent: seconds of steady steps measured before the interval may stop the run "
        "(slower effects, such as clocks settling, span more than a few fast steps).",
    )
    repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] | None = Field(
        default=None,
        description="Run the same work this many times, one after another on one node, each in a fresh "
        "process. status.results is then the mean over the repeats with 95% intervals across them, and "
        "status.repeats lists each repeat's throughput with the mean, interval and CV. A repeat that runs "
        "out of GPU memory or fails decides the outcome. Unset: 1 (the stability experiment runs its 5 trials "
        "this way and fixes it).",
    )
    warmup_steps: Annotated[int, Field(ge=0, le=MAX_STEPS)] | None = Field(
        default=None,
        description="Optimizer steps at the start of the measured window left out of the steady-state "
        "throughput, its 95% interval and the noise flags (allocator, compilation and data-loader start). "
        "Unset: the first 10% of the measured steps, at least 1 when there are two or more.",
    )
    distributed_backend: DistributedBackend | None = Field(
        default=None,
        description="PyTorch distributed backend for multi-GPU runs: FSDP, DDP, DeepSpeed (ZeRO: "
        "deepspeedZeroStage, deepspeedOffload; engine trl), or None (one process drives the node's GPUs with "
        "DataParallel, seed 001's DP; one node only). Unset: FSDP when numberGpus > 1, a single process otherwise.",
    )
    deepspeed_zero_stage: Annotated[int, Field(ge=2, le=3)] = Field(
        default=2,
        description="DeepSpeed ZeRO stage (distributedBackend DeepSpeed): 2 shards optimizer states and gradients, "
        "3 also the parameters. The stage in effect, read from the running engine, is in "
        "status.environment.deepspeed.",
    )
    deepspeed_offload: DeepSpeedOffload = Field(
        default=DeepSpeedOffload.NONE,
        description="DeepSpeed ZeRO-Offload (distributedBackend DeepSpeed): none, optimizer (optimizer states to CPU "
        "memory), or optimizerAndParameters (also the parameters; ZeRO stage 3 only).",
    )
    number_nodes: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=1,
        description="Number of machines; each uses numberGpus/numberNodes GPUs and one process per GPU.",
    )
    fms_hf_tuning_version: FmsHfTuningVersion = Field(
        default=DEFAULT_FMS_HF_TUNING_VERSION,
        description="fms-hf-tuning release to run (engine fms-hf-tuning); selects the trainer image tag.",
    )
    enable_roce: bool = Field(
        default=False,
        description="Use RDMA over Converged Ethernet between nodes. Only in effect for multi-node runs.",
    )
    fast_moe: Annotated[int, Field(ge=0, le=MAX_GPUS)] = Field(
        default=0,
        description="Expert-parallel sharding degree (fms-acceleration ep_degrees); 0 disables. numberGpus "
        "and the model's num_local_experts must be divisible by it. Needs fms-hf-tuning >= 2.4.0.",
    )
    fast_kernels: Annotated[list[bool], Field(min_length=3, max_length=3)] | None = Field(
        default=None,
        description="fms-acceleration fast kernels as three booleans: [fast_loss, fast_rms_layernorm, "
        "fast_rope_embeddings]. Unset: off.",
    )
    r: Annotated[int, Field(ge=1, le=MAX_BATCH)] | None = Field(
        default=None, description="LoRA rank (LoRA and GPTQ-LoRA only). Unset: 4."
    )
    lora_alpha: Annotated[int, Field(ge=1, le=MAX_BATCH)] | None = Field(
        default=None, description="LoRA alpha scaling (LoRA and GPTQ-LoRA only). Unset: 16."
    )
    target_modules: (
        Annotated[
            list[Identifier],
            Field(min_length=1, max_length=MAX_TARGET_MODULES),
        ]
        | None
    ) = Field(
        default=None,
        description="LoRA target modules (LoRA and GPTQ-LoRA only). Unset: the model catalog's per-model "
        "list (seed 001's table). Module names: a letter or '_', then letters, digits, '_', '.', '-'. An ftbench "
        "extension.",
    )
    optim: Optimizer = Field(default="adamw_torch", description="The optimizer (transformers TrainingArguments.optim).")
    bf16: bool = Field(default=False, description="Use bf16 mixed precision instead of 32-bit.")
    gradient_checkpointing_use_reentrant: bool = Field(
        default=False,
        description="Use the reentrant variant of activation checkpointing "
        "(gradient_checkpointing_kwargs.use_reentrant).",
    )
    fsdp_sharding_strategy: FsdpShardingStrategy = Field(
        default=FsdpShardingStrategy.FULL_SHARD,
        description="FSDP sharding: FULL_SHARD (optimizer states, gradients, parameters), SHARD_GRAD_OP "
        "(optimizer states, gradients), NO_SHARD (like DDP), HYBRID_SHARD, HYBRID_SHARD_ZERO2.",
    )
    fsdp_version: Annotated[int, Field(ge=1, le=2)] | None = Field(
        default=None,
        description="FSDP implementation: 2 (torch fully_shard, DTensor parameters; accelerate fsdp_version 2) "
        "or 1 (FullyShardedDataParallel, flat parameters). FSDP2 has no NO_SHARD, HYBRID_SHARD or "
        "forward/backward prefetch setting, and needs accelerate >= 1.6 (fms-hf-tuning >= 3.0.0). Unset: 2 "
        "where the engine offers it and no FSDP1-only setting is asked for, else 1. An ftbench extension.",
    )
    fsdp_offload_params: bool = Field(
        default=False,
        description="FSDP CPU offload of parameters, gradients and optimizer state (accelerate "
        "fsdp_offload_params). FSDP2 on CPU ranks applies it without pinned memory (pinning needs an "
        "accelerator); FSDP1 offload needs GPUs.",
    )
    fsdp_forward_prefetch: bool = Field(
        default=False,
        description="FSDP1 forward prefetch (all-gather the next layer during this one's forward). FSDP1 only.",
    )
    fsdp_backward_prefetch: FsdpBackwardPrefetch | None = Field(
        default=None,
        description="FSDP1 backward prefetch: BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH. FSDP1 only (FSDP2 "
        "prefetches the next layer by itself). Unset: BACKWARD_PRE with FSDP1 (seed 001's config).",
    )
    fsdp_state_dict_type: FsdpStateDictType = Field(
        default=FsdpStateDictType.FULL_STATE_DICT,
        description="FSDP state dict type used when a model is saved (FULL_STATE_DICT: one full file from rank 0; "
        "SHARDED_STATE_DICT: one shard per rank). Benchmarks never save; status.environment.fsdp records it.",
    )
    fsdp_use_orig_params: bool = Field(
        default=True,
        description="FSDP use_orig_params: allows interspersed frozen and trainable parameters.",
    )
    accelerate_config_mixed_precision: MixedPrecision = Field(
        default=MixedPrecision.NO,
        description="accelerate mixed_precision: no, fp16, bf16 or fp8 (fp8 needs transformer-engine).",
    )
    accelerate_config_fsdp_transformer_layer_cls_to_wrap: (
        Annotated[
            str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$")
        ]
        | None
    ) = Field(
        default=None,
        description="Comma-separated transformer layer class names FSDP wraps, e.g. LlamaDecoderLayer. "
        "Unset: the model catalog's class.",
    )
    dataset_text_field: Identifier | None = Field(
        default=None,
        description="Dataset column with the text (a letter or '_', then letters, digits, '_', '.', '-'). "
        "Unset: output (the generated datasets').",
    )
    dataset_image_field: Identifier | None = Field(
        default=None,
        description="Dataset column with the images (vision-language models; same characters as datasetTextField).",
    )
    remove_unused_columns: bool = Field(default=True, description="Remove dataset columns the model does not use.")
    dataset_kwargs_skip_prepare_dataset: bool = Field(
        default=False, description="Ask trl to skip preparing the dataset (dataset_kwargs.skip_prepare_dataset)."
    )

    run: RunSettings = Field(
        default_factory=RunSettings,
        description="How ftbench runs the experiment on Kubernetes (runtime, queue, limits). Not a seed parameter.",
    )
