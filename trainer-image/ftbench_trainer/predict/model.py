"""`predict(plan)`: the plan's model traced for its step, rescaled for its sharding."""

from __future__ import annotations

import time
from typing import Any

from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit
from ftbench_trainer.predict.plan_step import FLASH, sharding, step_shape
from ftbench_trainer.predict.shard import shard
from ftbench_trainer.predict.trace import Trace, trace_step

# GPTQ 4-bit weights: half a byte per weight, plus per group of 128 a float16 scale and a 4-bit zero.
GPTQ_BYTES_PER_WEIGHT = 0.5 + (2 + 0.5) / 128


class PredictionError(RuntimeError):
    """The prediction cannot be made (no config to read, an architecture transformers cannot build)."""


def read_config(plan: LaunchPlan) -> Any:
    """The model's config.json (no weights): the tiny model is built first when the plan says so."""
    from transformers import AutoConfig

    from ftbench_trainer.worker import resolve_model

    try:
        return AutoConfig.from_pretrained(resolve_model(plan))
    except (OSError, ValueError) as exc:
        raise PredictionError(
            f"cannot read the config of model {plan.model.name} at {plan.model.ref}: {exc}. The prediction "
            "needs the model's config.json only (no weights); point the model at a folder that has it"
        ) from exc


def predict(plan: LaunchPlan, config: Any | None = None) -> MemoryPrediction:
    started = time.perf_counter()
    config = read_config(plan) if config is None else config
    shape = step_shape(plan)
    s = sharding(plan)
    trace = trace_step(config, shape)
    notes = [
        f"the worst batch: {shape.batch} row(s) of modelMaxLength {shape.seq} tokens per device",
        f"AdamW {'foreach' if shape.device == 'cuda' else 'per-tensor'} as torch runs it on {shape.device}",
    ]
    if str(plan.training.attn_implementation) in FLASH:
        notes.append(
            f"{plan.training.attn_implementation} traced as sdpa's memory-efficient kernel (the same O(seq) state)"
        )
    traced, layer_bytes = trace.phases, trace.largest_layer_bytes
    if plan.method == "gptq-lora":  # quantize the whole model's weights first, then shard what is left
        traced = {k: _gptq(v, trace) for k, v in traced.items()}
        layer_bytes = int(layer_bytes * GPTQ_BYTES_PER_WEIGHT / 2)
        notes.append(
            "estimate: GPTQ base weights counted as 4-bit with group-128 scales and zeros; the kernels' "
            "dequantisation temporaries are not traced"
        )
    phases = shard(traced, s, layer_bytes=layer_bytes)
    if s.kind == "none" and plan.topology.world_size > 1:
        notes.append(
            "DataParallel: predicted for one device at the per-device batch; outputs gathered on GPU 0 not modelled"
        )
    phase = max(phases, key=lambda p: phases[p].total)
    peak = phases[phase]
    return MemoryPrediction(
        peak_bytes=peak.total,
        split=MemorySplit(
            parameters_bytes=peak.parameters,
            gradients_bytes=peak.gradients,
            optimizer_bytes=peak.optimizer,
            activations_bytes=peak.other,
        ),
        phase=phase,  # type: ignore[arg-type]
        device=shape.device,
        world_size=plan.topology.world_size,
        sharding=s.label,
        traced_parameters=trace.parameters,
        trainable_parameters=trace.trainable,
        seconds=round(time.perf_counter() - started, 3),
        notes=tuple(notes),
    )


def _gptq(split: Any, trace: Trace) -> Any:
    quantized = int(trace.quantizable_weights * GPTQ_BYTES_PER_WEIGHT)
    fp16 = trace.quantizable_weights * 2
    return type(split)(max(0, split.parameters - fp16 + quantized), split.gradients, split.optimizer, split.other)
