"""The launch plan: everything the trainer needs, decided before any pod starts.

Built by `ftbench.render.plan` (pure: spec + catalog + cluster profile -> LaunchPlan), serialised as
JSON into the ConfigMap the pods mount (or a file for `ftbench run`), and executed by
`ftbench-trainer`. Values known only at run time (node rank, master address) are described here
by *where to read them* (`rendezvous`), not by value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, model_validator

from ftbench.contracts.enums import AttentionImplementation, DistributedBackend, Engine, Experiment, TorchDtype
from ftbench.contracts.wire import WireModel

PLAN_SCHEMA_VERSION: Final = "ftbench.io/plan/v1"
PLAN_FILENAME = "plan.json"
# Where pods mount the plan ConfigMap.
PLAN_MOUNT_DIR = "/etc/ftbench"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
RESPONSE_TEMPLATE = "\n### Response:"


class ExperimentRef(WireModel):
    """Which object (or local run) this plan belongs to: labels results and progress reports."""

    name: str
    namespace: str = ""
    uid: str = ""
    attempt: Annotated[int, Field(ge=0)] = 0


class ModelRef(WireModel):
    name: str = Field(description="Catalog name, e.g. llama3.1-8b.")
    ref: str = Field(description="What from_pretrained gets: a Hugging Face id or an absolute path.")
    weights: Literal["vanilla", "gptq"] = "vanilla"
    generated: bool = Field(False, description="Build the tiny local model at `ref` if missing (tests, quickstart).")
    layer_class: str | None = None
    num_local_experts: int | None = None
    architecture: dict[str, Any] | None = Field(
        None, description="The catalog's config.json fields (model_type, sizes) for memory prediction without weights."
    )


class DatasetGenerator(WireModel):
    """How the trainer generates an artificial dataset (seed 002): the catalog's entry, carried in the plan so
    the trainer needs no catalog."""

    kind: Literal["chars", "tokens", "vision"]
    entries: Annotated[int, Field(ge=1)]
    chars: Annotated[int, Field(ge=1)] | None = Field(None, description="chars: characters of prompt and response.")
    min_tokens: Annotated[int, Field(ge=1)] | None = Field(None, description="tokens: words per entry at least.")
    width: Annotated[int, Field(ge=1)] | None = Field(None, description="vision: image width.")
    height: Annotated[int, Field(ge=1)] | None = Field(None, description="vision: image height.")

    def params(self) -> dict[str, Any]:
        """The generator's parameters as its functions take them (unset ones left out)."""
        return self.model_dump(exclude_none=True)


class DatasetRef(WireModel):
    id: str
    generator: DatasetGenerator | None = Field(
        None, description="How to generate it where no file is there (the catalog's entry); unset: not generated."
    )
    path: str | None = Field(
        None,
        description="A pre-generated file to use as is. Unset: the trainer generates the dataset into dataDir "
        "once, under a content-keyed name, and reuses it afterwards.",
    )
    entries: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Override of the catalog's entry count (small smoke runs); part of the content key."
    )
    generate_if_missing: bool = True


class Topology(WireModel):
    number_nodes: Annotated[int, Field(ge=1)]
    number_gpus: Annotated[int, Field(ge=0)]
    gpus_per_node: Annotated[int, Field(ge=0)]
    processes_per_node: Annotated[int, Field(ge=1)]
    world_size: Annotated[int, Field(ge=1)]
    batch_size: Annotated[int, Field(ge=1)] = Field(description="Effective batch size (spec.batchSize).")
    per_device_batch_size: Annotated[int, Field(ge=1)]


RendezvousSource = Literal["local", "pytorchjob", "indexedjob", "trainjob"]


class Rendezvous(WireModel):
    """How a node learns its rank and the master's address at run time."""

    source: RendezvousSource = Field(
        description="local: single machine (rank 0, 127.0.0.1). pytorchjob: Kubeflow's node-level RANK, "
        "MASTER_ADDR, MASTER_PORT env. indexedjob: JOB_COMPLETION_INDEX env and masterHost. trainjob: "
        "Kubeflow Trainer v2's PET_NODE_RANK, PET_NNODES, PET_MASTER_ADDR, PET_MASTER_PORT env."
    )
    master_host: str = Field("127.0.0.1", description="Rank-0 host for indexedjob (<job>-0.<service>).")
    port: Annotated[int, Field(ge=1, le=65535)] = 29500


class PeftSettings(WireModel):
    """The PEFT method and, for LoRA, its shape: the plan carries api.effective's values, so the trainer
    and the predictor have no defaults of their own that could disagree with them."""

    method: Literal["none", "lora", "pt"]
    r: int | None = None
    lora_alpha: int | None = None
    target_modules: tuple[str, ...] | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    num_virtual_tokens: Annotated[int, Field(ge=1)] | None = Field(None, description="Prompt tuning's virtual tokens.")

    @model_validator(mode="after")
    def _lora_has_its_shape(self) -> PeftSettings:
        if self.method == "lora" and (self.r is None or self.lora_alpha is None or self.lora_dropout is None):
            raise ValueError("a LoRA plan sets r, loraAlpha and the dropout (render.plan fills in the defaults)")
        if self.method == "pt" and self.num_virtual_tokens is None:
            raise ValueError("a prompt-tuning plan sets num_virtual_tokens (render.plan fills in the default)")
        return self

    def lora_shape(self) -> tuple[int, int, float]:
        """(r, lora_alpha, lora_dropout) of a LoRA plan."""
        if self.r is None or self.lora_alpha is None or self.lora_dropout is None:
            raise ValueError(f"peft method {self.method} has no LoRA shape")
        return self.r, self.lora_alpha, self.lora_dropout

    def virtual_tokens(self) -> int:
        """Prompt tuning's virtual tokens."""
        if self.num_virtual_tokens is None:
            raise ValueError(f"peft method {self.method} has no virtual tokens")
        return self.num_virtual_tokens


class FsdpSettings(WireModel):
    """The FSDP the plan asks for; the trainer checks the wrapped model against `version`."""

    version: Annotated[int, Field(ge=1, le=2)] = 1
    sharding_strategy: str
    state_dict_type: str
    use_orig_params: bool
    layer_classes: str | None
    offload_params: bool = False
    forward_prefetch: bool = False
    backward_prefetch: str | None = None


class DeepSpeedSettings(WireModel):
    """DeepSpeed ZeRO as the plan asks for it (distributedBackend DeepSpeed); the engine turns it into
    its DeepSpeed config and the trainer reads back the stage and offload in effect."""

    zero_stage: Annotated[int, Field(ge=2, le=3)]
    offload_optimizer: bool = False
    offload_parameters: bool = False


class TrainingSettings(WireModel):
    """The hyperparameters of seed 001's command line, typed; both engines read these."""

    torch_dtype: TorchDtype
    model_max_length: Annotated[int, Field(ge=1)]
    # Resolved, never auto: what the engine loads the model with (transformers' attn_implementation).
    attn_implementation: AttentionImplementation
    response_template: str = RESPONSE_TEMPLATE
    dataset_text_field: str = "output"
    dataset_image_field: str | None = None
    num_train_epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.03
    lr_scheduler_type: str = "cosine"
    logging_steps: int = 1
    gradient_accumulation_steps: Annotated[int, Field(ge=1)] = 4
    gradient_checkpointing: bool = True
    gradient_checkpointing_use_reentrant: bool = False
    packing: bool = False
    use_liger_kernel: bool = False
    deepspeed: DeepSpeedSettings | None = None
    optim: str = "adamw_torch"
    bf16: bool = False
    fp16: bool = False
    peft: PeftSettings
    fast_moe: int = 0
    fast_kernels: tuple[bool, bool, bool] | None = None
    # GPTQ-LoRA's fms-acceleration arguments, verbatim from seed 001.
    fused_lora: tuple[str, ...] | None = None
    auto_gptq: tuple[str, ...] | None = None
    remove_unused_columns: bool = True
    dataset_kwargs_skip_prepare_dataset: bool = False
    seed: int = 42


class StopSettings(WireModel):
    """Seed 001's stop controls. The auto-stop thresholds are parameters so tests can shrink them."""

    stop_after_seconds: float = -1.0
    auto_stop_method: str | None = None
    auto_stop_warmup_seconds: float = 60.0
    auto_stop_stable_seconds: float = 120.0
    auto_stop_stable_steps: int = 10
    # spec.targetPrecisionPercent as a fraction (None: no precision stop) and its minimum window.
    target_precision: float | None = None
    precision_min_steps: int = 20
    precision_min_seconds: float = 30.0
    # Steps left out of the steady state at the window's start (None: the first 10%); not a stop
    # control, but read at the same place (the callback's window).
    warmup_steps: int | None = None


class NetworkPreflightSettings(WireModel):
    """The collective bandwidth self-test every rank runs before training (spec.run.networkPreflight)."""

    sizes_bytes: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        description="Message sizes S, small to large (nccl-tests' S: the all-gather's is the total size)."
    )
    warmup_iterations: Annotated[int, Field(ge=0)] = 2
    iterations: Annotated[int, Field(ge=1)] = 10
    time_budget_seconds: Annotated[float, Field(gt=0)] = Field(
        30.0, description="Fewer iterations, then no larger sizes, once the measured times would exceed it."
    )
    require_roce: bool = Field(
        False, description="spec.run.requireRoce: refuse to train (outcome NetworkUnfit) unless NCCL uses RoCE."
    )
    only: bool = Field(
        False, description="spec.run.networkPreflight only: end after the preflight; no model is loaded or trained."
    )


class OutputSettings(WireModel):
    dir: str = Field(description="Scratch output directory (checkpoints are never saved).")
    result_file: str = Field(description="Full result JSON written by rank 0.")
    termination_message_path: str = DEFAULT_TERMINATION_MESSAGE_PATH
    progress_interval_seconds: float = 10.0
    report_progress_to_kubernetes: bool = False
    metrics_port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None,
        description="Each rank serves its live training metrics for Prometheus on this port "
        "(ftbench.contracts.live_metrics); None: not served (local runs).",
    )
    events_file: str | None = Field(
        None,
        description="A file only ftbench writes: rank 0 appends its progress lines and the node its result lines "
        "(ftbench.contracts.events). `ftbench run` sets it and tails it; None on a cluster.",
    )


class LaunchPlan(WireModel):
    schema_version: Literal["ftbench.io/plan/v1"] = PLAN_SCHEMA_VERSION
    experiment_ref: ExperimentRef
    experiment: Experiment
    method: Literal["full", "lora", "gptq-lora", "pt"]
    engine: Engine
    engine_version: str = Field("", description="fms-hf-tuning release for engine fms-hf-tuning.")
    allow_engine_mismatch: bool = Field(
        False,
        description="Run whichever fms-hf-tuning release is installed even if it is not engineVersion. Only "
        "`ftbench run --any-fms-release` sets it; the operator never does. The result names the release that ran.",
    )
    model: ModelRef
    dataset: DatasetRef
    data_dir: str
    hf_home: str | None = None
    topology: Topology
    launcher: Literal["direct", "accelerate"] = Field(
        description="direct: one process runs the training module (<= 1 GPU, as the seed does). "
        "accelerate: `accelerate launch` with accelerateConfig."
    )
    distributed_backend: DistributedBackend | None = None
    fsdp: FsdpSettings | None = None
    mixed_precision: str = "no"
    accelerate_config: dict[str, Any] | None = Field(
        None,
        description="Seed 001's accelerate config with the spec's values; machine_rank, "
        "main_process_ip/port are filled at run time from `rendezvous`.",
    )
    rendezvous: Rendezvous
    training: TrainingSettings
    stop: StopSettings
    trials: Annotated[int, Field(ge=1)] = 1
    use_cpu: bool = Field(False, description="No GPUs: train on CPU (gloo across processes).")
    network_preflight: NetworkPreflightSettings | None = Field(
        None, description="The collective bandwidth self-test before training; None: none runs."
    )
    output: OutputSettings
    notes: tuple[str, ...] = Field((), description="Decisions a user should know about, e.g. RoCE ignored.")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LaunchPlan:
        return cls.model_validate(json.loads(text))

    @classmethod
    def read(cls, path: str | Path) -> LaunchPlan:
        return cls.from_json(Path(path).read_text())
