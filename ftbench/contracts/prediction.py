"""A memory prediction: peak tensor memory per device, predicted before any weights load.

The trainer's predictor (`ftbench_trainer.predict`) traces one real training step of the real
architecture with fake tensors and prints one `PREDICTION_PREFIX` line with this model as JSON;
`ftbench predict` reads it, and `ftbench run` records it beside the measured peak. Three processes
read it, so its shape is defined here once.

Every byte figure is *tensor memory*: what `torch.cuda.max_memory_allocated` counts on a GPU, and
what the same tracker counts on CPU. The CUDA context, NCCL buffers and the caching allocator's
reserve are not tensors; they come from the cluster profile (`runtimeOverheadBytes`) and are named
apart (`runtime_overhead_bytes`), never folded into the traced figures.
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import Field

from ftbench.contracts.wire import WireModel

PREDICTION_PREFIX: Final = "FTBENCH_PREDICTION"
# Whether the predictor models Mamba-2 layers as mamba_ssm's fused kernels run them (what transformers runs on a
# GPU when mamba_ssm and causal_conv1d are installed) or as transformers' own torch path (without them, on GPUs
# too): "auto" (default) follows whether the predictor's environment, the run's image, has both packages;
# "true" or "false" says so (bench/fleet.py: ado's images had them).
MAMBA_KERNELS_ENV: Final = "FTBENCH_PREDICT_MAMBA_KERNELS"
# A plan of a batch (`python -m ftbench_trainer.predict --batch`) that could not be predicted: {"error": why}.
PREDICTION_ERROR_PREFIX: Final = "FTBENCH_PREDICTION_ERROR"
# Where the peak was reached in the traced step.
Phase = Literal["forward", "backward", "optimizer"]
Bytes = Annotated[int, Field(ge=0)]


class MemorySplit(WireModel):
    """What was live at the peak, by what holds it."""

    parameters_bytes: Bytes = Field(
        description="Model parameters and buffers (this rank's shard, plus gathered units)."
    )
    gradients_bytes: Bytes = Field(description="Gradients live at the peak (this rank's shard).")
    optimizer_bytes: Bytes = Field(description="Optimizer state (AdamW moments) and the step's temporaries.")
    activations_bytes: Bytes = Field(
        description="Everything else: activations saved for backward, the loss path, temporaries."
    )


PROMPT_LENGTHS_LIMIT = 65536
# The note that says how the rows that train were (or why they were not) counted; `ftbench predict` shows it.
ROWS_NOTE_PREFIX = "rows that train: "


class PromptLength(WireModel):
    tokens: Annotated[int, Field(ge=0)] = Field(description="Prompt tokens.")
    entries: Annotated[int, Field(ge=1)] = Field(description="Dataset entries whose prompt has that many.")


class MemoryPrediction(WireModel):
    """Peak memory of one rank (ranks differ only by the remainder of a shard), predicted."""

    peak_bytes: Bytes = Field(
        description="Predicted peak tensor memory per device (what max_memory_allocated reports)."
    )
    split: MemorySplit
    phase: Phase = Field(description="Where in the step the peak falls.")
    activations_peak_bytes: Bytes = Field(
        0,
        description="The most forward or backward hold beyond parameters, gradients and optimizer state "
        "(activations, the loss path, temporaries): what the caching allocator's reserve grows with.",
    )
    unsharded_gradient_bytes: Bytes = Field(
        0,
        description="FSDP with gradient accumulation: the whole unsharded gradient of what FSDP trains, which "
        "no_sync keeps between micro-steps. FSDP1: computed, not in peak_bytes. FSDP2: what of it the traced peak "
        "holds (unshardedGradientsInPeak). The device-level peak shows it as its own term, outside the verdict.",
    )
    unsharded_gradients_in_peak: bool = Field(
        False,
        description="True where unshardedGradientBytes is part of peak_bytes (FSDP2's trace holds them): the "
        "device-level peak takes them out of the tensors term, so its total is the same either way.",
    )
    expert_shapes_vary: bool = Field(
        False,
        description="The engine's MoE layers make tensors sized by each expert's token count, which the router "
        "changes every step (transformers 4.x GraniteMoe, granite-4.0-h and Mixtral experts; fastMoe's dispatch is "
        "expert_parallel): "
        "the caching allocator's reserve grows with them (ftbench.predict.device_memory).",
    )
    expert_parallel: Annotated[int, Field(ge=0)] = Field(
        0,
        description="fastMoe's expert-parallel degree on several FSDP ranks (0: none, or one rank): above 1, every "
        "MoE layer dispatches its tokens to the ranks that hold their experts, into buffers sized by how many rows "
        "each rank receives that step.",
    )
    runtime_overhead_bytes: Bytes = Field(
        0,
        description="Not traced: CUDA context, NCCL buffers, allocator reserve; the cluster profile's constant for "
        "the GPU model (0 on CPU).",
    )
    device: Literal["cuda", "cpu"] = Field(description="The device the prediction is for (its optimizer defaults).")
    world_size: Annotated[int, Field(ge=1)] = Field(description="Ranks of the run.")
    nodes: Annotated[int, Field(ge=1)] = Field(1, description="Nodes the ranks are spread over.")
    sharding: str = Field(description="How state is split across ranks: none, ddp, or the FSDP strategy.")
    traced_parameters: Annotated[int, Field(ge=0)] = Field(description="Parameters of the traced model (exact).")
    trainable_parameters: Annotated[int, Field(ge=0)] = Field(description="Parameters that train (LoRA, prompt).")
    seconds: Annotated[float, Field(ge=0)] = Field(description="How long the prediction took.")
    notes: tuple[str, ...] = Field((), description="What the prediction assumed or could not model.")
    prompt_tokens: Annotated[list[PromptLength], Field(max_length=PROMPT_LENGTHS_LIMIT)] | None = Field(
        None,
        description="How many entries of the run's dataset have each prompt length under the model's own tokenizer "
        "(the text up to and including the response template): a row keeps a trained token exactly when its "
        "prompt is shorter than modelMaxLength. Unset where the predictor has no tokenizer for the model (notes "
        "say why).",
    )

    def prompt_lengths(self) -> dict[int, int] | None:
        """prompt_tokens as {prompt tokens: entries}."""
        return {p.tokens: p.entries for p in self.prompt_tokens} if self.prompt_tokens else None

    @property
    def total_bytes(self) -> int:
        """The peak plus what is not traced: what must fit in the device's memory."""
        return self.peak_bytes + self.runtime_overhead_bytes

    def line(self) -> str:
        return f"{PREDICTION_PREFIX} {self.model_dump_json(by_alias=True)}"


def parse_prediction_line(line: str) -> MemoryPrediction | None:
    """The prediction in one output line, or None if the line is not one."""
    head, _, body = line.strip().partition(" ")
    if head != PREDICTION_PREFIX or not body:
        return None
    return MemoryPrediction.model_validate(json.loads(body))


def parse_batch_line(line: str) -> MemoryPrediction | str | None:
    """One line of a batch's output: its prediction, the reason it has none, or None (not a batch line)."""
    head, _, body = line.strip().partition(" ")
    if head == PREDICTION_ERROR_PREFIX and body:
        return str(json.loads(body).get("error", "the prediction failed"))
    return parse_prediction_line(line)


# The predictor service (`python -m ftbench_trainer.predict.serve`, the chart's `predictor`): the operator
# POSTs a launch plan as JSON here and gets a MemoryPrediction back (422 with {"error": ...} when the
# prediction cannot be made, e.g. no config.json at the model's path).
PREDICT_PATH: Final = "/v1/predict"
HEALTH_PATH: Final = "/healthz"
PREDICTOR_PORT: Final = 8470
