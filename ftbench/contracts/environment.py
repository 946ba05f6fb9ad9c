"""What actually ran: the environment a result records, read at run time, never from the spec.

Versions, the distributed mode and the FSDP / DeepSpeed settings in effect as the running engine
has them, so a result says what was measured even where it differs from what was asked for.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ftbench.contracts.bounded import BoundedName, BoundedReason
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.numbers import Count
from ftbench.contracts.trainer_status import TrainerStatusReport
from ftbench.contracts.wire import WireModel

# The equivalent bare command kept in results (the termination message holds 4 KiB in all).
COMMAND_LIMIT = 1200


class DeepSpeedInEffect(WireModel):
    """DeepSpeed ZeRO as the running engine has it (accelerate's DeepSpeed plugin), not from the spec."""

    zero_stage: Annotated[int, Field(ge=0, le=3)] = Field(description="ZeRO stage of the engine.")
    offload_optimizer_device: BoundedReason = Field(
        "none", description="Where the optimizer states live: none (with the ranks) or cpu (ZeRO-Offload)."
    )
    offload_param_device: BoundedReason = Field("none", description="Where the parameters live: none or cpu.")


class FsdpInEffect(WireModel):
    """FSDP as read from the wrapped model at the start of training, not from the spec."""

    version: Annotated[int, Field(ge=1, le=2)] = Field(description="1: FullyShardedDataParallel; 2: fully_shard.")
    sharding_strategy: str = Field(
        description="FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, ... (FSDP2: FULL_SHARD when parameters "
        "are resharded after forward, SHARD_GRAD_OP when they are kept)."
    )
    reshard_after_forward: bool = Field(
        description="Whether each wrapped layer frees its gathered parameters after forward."
    )
    wrapped_modules: Count = Field(description="Modules FSDP wraps (layers plus the root).")
    wrapped_layer_classes: str = Field("", description="Comma-separated classes of the wrapped layers.")
    forward_prefetch: bool = Field(False, description="FSDP1 forward prefetch (FSDP2 has none).")
    backward_prefetch: str = Field(
        "", description="FSDP1 backward prefetch (BACKWARD_PRE, BACKWARD_POST); empty for none and for FSDP2."
    )
    offload_params: bool = Field(False, description="Parameters (and so gradients and optimizer state) live on CPU.")
    offload_pin_memory: bool = Field(False, description="Offloaded memory is pinned (never on CPU ranks).")
    param_dtype: str = Field("", description="Mixed-precision dtype of parameters in compute; empty: no cast.")
    reduce_dtype: str = Field("", description="Mixed-precision dtype of gradient reduction; empty: no cast.")
    state_dict_type: str = Field("", description="accelerate's FSDP state dict type used when a model is saved.")
    sharded_parameters: Count = Field(
        0, description="Parameters held as DTensor shards (FSDP2) or inside flat parameters (FSDP1)."
    )


class RunEnvironment(WireModel):
    """What actually ran: versions and the distributed mode read at run time, not from the spec."""

    engine: BoundedReason = Field(description="fms-hf-tuning or trl.")
    engine_version: BoundedName = Field("", description="Version of the training library.")
    image: BoundedName = Field("", description="Container image, from the FTBENCH_IMAGE env var when set.")
    torch_version: BoundedName = Field("", description="torch.__version__.")
    transformers_version: BoundedName = Field("", description="transformers.__version__.")
    trl_version: BoundedName = Field("", description="trl.__version__.")
    peft_version: BoundedName = Field("", description="peft.__version__.")
    accelerate_version: BoundedName = Field("", description="accelerate.__version__.")
    gpu_name: BoundedName = Field("", description="Name NVML reports for GPU 0 of rank 0; empty on CPU.")
    number_nodes: Annotated[int, Field(ge=1)] = Field(1, description="Machines that took part.")
    world_size: Annotated[int, Field(ge=1)] = Field(1, description="Training processes that took part.")
    distributed_mode: BoundedReason = Field(
        "NO",
        description="accelerate's distributed type in effect (NO, MULTI_GPU, MULTI_CPU, FSDP, ...), "
        "read from the running Accelerator; may differ from the requested backend (FSDP on CPU runs as DDP).",
    )
    device: BoundedReason = Field("cpu", description="cuda or cpu.")
    dataset_file: Annotated[str, Field(max_length=512)] = Field(
        "", description="The dataset file trained on: seed 002's <dataDir>/<datasetId>.jsonl|parquet when present."
    )
    dataset_generated: bool = Field(
        False, description="True when this run generated the dataset file (it was missing), False when it existed."
    )
    fsdp: FsdpInEffect | None = Field(
        None, description="FSDP in effect, read from the wrapped model; unset without FSDP."
    )
    deepspeed: DeepSpeedInEffect | None = Field(
        None, description="DeepSpeed ZeRO in effect, read from the running engine; unset without DeepSpeed."
    )
    activation_checkpointing: bool = Field(
        False,
        description="Gradient (activation) checkpointing in effect, read from the model at the start of training.",
    )
    packing: BoundedReason = Field(
        "",
        description="How packed samples were kept from attending to each other, read from the batches the model "
        "consumed: flashVarlen (position ids, flash attention's varlen kernels), positionIds (position ids, from "
        "which transformers masks each sample for sdpa and eager), none (not isolated); empty when the run did "
        "not pack.",
    )
    liger_kernel: bool = Field(
        False,
        description="Liger's kernels patched into the trained model (its modules' forward functions are "
        "liger_kernel's), read at the start of training.",
    )
    attention_implementation: BoundedReason = Field(
        "",
        description="transformers' attention implementation in effect (eager, sdpa, flash_attention_2, ...), "
        "read from the loaded model's config at the start of training.",
    )
    command: Annotated[str, Field(max_length=COMMAND_LIMIT)] = Field(
        "",
        description="The bare fms-hf-tuning command that trains the same way (accelerate launch ... -m "
        f"tuning.sft_trainer ...), cut at {COMMAND_LIMIT} characters; empty for trl.",
    )
    kubeflow_trainer_status: TrainerStatusReport | None = Field(
        None,
        description="Inside a Kubeflow TrainJob whose Trainer offers its status endpoint (feature gate "
        "TrainJobStatus): how rank 0's trainerStatus updates went. Unset elsewhere.",
    )
    network: NetworkInEffect | None = Field(
        None,
        description="The network preflight (spec.run.networkPreflight): the transport in effect and the "
        "measured collective bandwidth; unset when it did not run.",
    )
