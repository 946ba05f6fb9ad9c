"""Closed value sets of the API, with the seed's spelling (they end up as CRD enums)."""

from enum import StrEnum


class Experiment(StrEnum):
    """The five experiments of the SFTTrainer actuator (seed 001), names kept verbatim."""

    FULL = "finetune_full_benchmark-v1.0.0"
    FULL_STABILITY = "finetune_full_stability-v1.0.0"
    LORA = "finetune_lora_benchmark-v1.0.0"
    # The seed spells it "gtpq" and that stays the canonical name; ado's code registers
    # "gptq" (EXPERIMENT_ALIASES), which the spec accepts and stores as this one.
    GPTQ_LORA = "finetune_gtpq-lora_benchmark-v1.0.0"
    PROMPT_TUNING = "finetune_pt_benchmark-v1.0.0"


#: Other spellings users bring from ado's code (its registered experiment ids) -> canonical.
EXPERIMENT_ALIASES: dict[str, Experiment] = {"finetune_gptq-lora_benchmark-v1.0.0": Experiment.GPTQ_LORA}


def experiment_spellings(experiment: Experiment) -> tuple[str, ...]:
    """Every accepted spelling of `experiment`, canonical first (CEL rules test them all)."""
    return (experiment.value, *sorted(a for a, e in EXPERIMENT_ALIASES.items() if e == experiment))


def canonical_experiment(value: object) -> object:
    """Map an alias to its canonical Experiment; leave anything else to the enum's own check."""
    return EXPERIMENT_ALIASES.get(value, value) if isinstance(value, str) else value


class Engine(StrEnum):
    FMS_HF_TUNING = "fms-hf-tuning"
    TRL = "trl"


class TorchDtype(StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class DistributedBackend(StrEnum):
    FSDP = "FSDP"
    DDP = "DDP"
    # Seed 001: "None (i.e. Data Parallel (DP))": one process drives every GPU of the node
    # through torch.nn.DataParallel (HF Trainer does this when it sees several GPUs).
    NONE = "None"
    # DeepSpeed ZeRO (stage and offload: spec deepspeedZeroStage, deepspeedOffload); engine trl.
    DEEPSPEED = "DeepSpeed"


class DeepSpeedOffload(StrEnum):
    """What DeepSpeed ZeRO moves to CPU memory (ZeRO-Offload)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_AND_PARAMETERS = "optimizerAndParameters"  # parameter offload: ZeRO stage 3 only


class AutoStopMethod(StrEnum):
    WARMUP_60S_STABLE_120S_OR_10_STEPS = "WARMUP_60S_STABLE_120S_OR_10_STEPS"


class FsdpShardingStrategy(StrEnum):
    FULL_SHARD = "FULL_SHARD"
    SHARD_GRAD_OP = "SHARD_GRAD_OP"
    NO_SHARD = "NO_SHARD"
    HYBRID_SHARD = "HYBRID_SHARD"
    HYBRID_SHARD_ZERO2 = "HYBRID_SHARD_ZERO2"


class AttentionImplementation(StrEnum):
    """transformers' `attn_implementation` the model is loaded with (auto: ftbench chooses)."""

    AUTO = "auto"
    EAGER = "eager"
    SDPA = "sdpa"
    FLASH_ATTENTION_2 = "flash_attention_2"


class Device(StrEnum):
    """What one rank trains on: a GPU, or a CPU process (gloo) for the same plan on CPU ranks."""

    GPU = "gpu"
    CPU = "cpu"


class FsdpBackwardPrefetch(StrEnum):
    """FSDP1's backward prefetch (torch.distributed.fsdp.BackwardPrefetch); FSDP2 prefetches by itself."""

    BACKWARD_PRE = "BACKWARD_PRE"
    BACKWARD_POST = "BACKWARD_POST"
    NO_PREFETCH = "NO_PREFETCH"


class FsdpStateDictType(StrEnum):
    FULL_STATE_DICT = "FULL_STATE_DICT"
    LOCAL_STATE_DICT = "LOCAL_STATE_DICT"
    SHARDED_STATE_DICT = "SHARDED_STATE_DICT"


class MixedPrecision(StrEnum):
    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


class Runtime(StrEnum):
    """How the pods are created. `auto` picks per the cluster profile (see docs/architecture.md)."""

    AUTO = "auto"
    JOB = "Job"
    INDEXED_JOB = "IndexedJob"
    PYTORCH_JOB = "PyTorchJob"
    TRAIN_JOB = "TrainJob"


class OomPrecheck(StrEnum):
    """What a predicted out-of-memory does before any pod starts (spec.run.oomPrecheck)."""

    WARN = "warn"  # record the prediction, warn, run anyway
    REFUSE = "refuse"  # Invalid (PredictedOOM) with the numbers; nothing is created
    OFF = "off"  # no prediction


class NetworkPreflight(StrEnum):
    """Whether the collective bandwidth self-test runs before training (spec.run.networkPreflight)."""

    AUTO = "auto"  # on for multi-node runs, off on one node
    ON = "on"  # every run with more than one rank
    OFF = "off"
    ONLY = "only"  # the preflight and nothing else: no model is loaded, nothing is trained


# The optimizers transformers' TrainingArguments accepts, as listed by seed 001.
OPTIMIZERS: tuple[str, ...] = (
    "adamw_hf",
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_apex_fused",
    "adafactor",
    "adamw_anyprecision",
    "adamw_torch_4bit",
    "ademamix",
    "sgd",
    "adagrad",
    "adamw_bnb_8bit",
    "adamw_8bit",
    "ademamix_8bit",
    "lion_8bit",
    "lion_32bit",
    "paged_adamw_32bit",
    "paged_adamw_8bit",
    "paged_ademamix_32bit",
    "paged_ademamix_8bit",
    "paged_lion_32bit",
    "paged_lion_8bit",
    "rmsprop",
    "rmsprop_bnb",
    "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit",
    "galore_adamw",
    "galore_adamw_8bit",
    "galore_adafactor",
    "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise",
    "galore_adafactor_layerwise",
    "lomo",
    "adalomo",
    "grokadamw",
    "schedule_free_adamw",
    "schedule_free_sgd",
)
