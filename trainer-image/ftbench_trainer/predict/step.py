"""What a trace is asked (StepShape, FsdpShape) and what it answers (Trace): torch-free, so the predictor reads a
stored trace (predict.trace_store) without importing torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ftbench_trainer.measure.split import Split

Method = Literal["full", "lora", "gptq-lora", "pt"]
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class StepShape:
    """What one rank's training step looks like, as far as memory goes."""

    method: Method
    dtype: str  # parameters' dtype: float32, bfloat16, float16
    autocast: str | None  # bfloat16 or float16 mixed precision, None for none
    attention: str  # transformers attn_implementation
    checkpointing: bool
    batch: int  # per device
    seq: int
    device: Literal["cuda", "cpu"] = "cuda"
    gradient_accumulation: int = 1
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: tuple[str, ...] | None = None
    pt_virtual_tokens: int = 20
    max_grad_norm: float | None = 1.0
    fused_lm_head: tuple[str, ...] = ()  # trl's fused LM head and the per-token outputs it computes; () for none
    logits_accuracy: bool = False  # trl 0.x SFTTrainer: token accuracy from a contiguous copy of the shifted logits
    no_sync: bool = False  # accumulated micro-steps skip FSDP2's reduce-scatter until the last (accelerate's no_sync)


@dataclass(frozen=True)
class FsdpShape:
    """FSDP2 over `ranks` ranks: FULL_SHARD reshards each layer after its forward, SHARD_GRAD_OP keeps it."""

    ranks: int
    reshard_after_forward: bool


@dataclass(frozen=True)
class Trace:
    """The traced step: each phase's peak, split by holder, and the model's sizes."""

    phases: dict[str, Split]
    parameters: int
    trainable: int
    parameter_bytes: int
    largest_layer_bytes: int  # one decoder layer's parameters: what FSDP gathers at a time
    trainable_bytes: int  # the parameters that train, in their dtype
    root_bytes: int  # parameters outside the decoder layers (embeddings, final norm, LM head): FSDP's root unit
    root_trainable_bytes: int  # the part of them that trains
    expert_bytes: int  # MoE experts' parameters (what fastMoe's expert parallelism places per rank)
    expert_trainable_bytes: int
    layer_expert_bytes: int  # the experts of the largest layer
    quantizable_weights: int  # weights of the decoder layers' linear layers (what GPTQ quantizes)
    seconds: float
    routing: str | None = None  # how an MoE model's routing was traced (traceable.make_traceable's note)
    ends: dict[str, Split] = dataclasses.field(default_factory=dict)  # forward's and backward's last state
    tails: dict[str, Split] = dataclasses.field(default_factory=dict)  # backward's peak from its first layer on

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: self.phases[p].total)
