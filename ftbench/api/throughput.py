"""Predicted steady throughput of a spec before it runs (an estimate, and named so everywhere it shows).

A step's time is its compute plus the communication that compute does not hide:

    compute = hardware FLOPs per device per optimizer step / (GPU peak x efficiency)
    exposed = max(0, communication - overlap x compute)
    tokens/s = tokens per optimizer step / (compute + exposed)

- FLOPs: the trainer's own MFU accounting (ftbench.stats.flops: 4N + 2N_trainable per token plus the
  attention term, on every token of a full-length row), with the forward pass gradient checkpointing
  runs again; N is the parameters a token passes through (ftbench.catalog.parameters: a mixture of
  experts counts only the experts it is routed to).
- Peak: the GPU model's dense bf16/fp16 data-sheet peak (the same table as the measured MFU).
- Efficiency (the share of the peak a step's hardware FLOPs reach, before communication): a log-linear model of
  what drives it, with coefficients fitted on ado's fleet (`bench/fleet_throughput.py fit`, sample A,
  single-node rows: NVLink's FSDP traffic is part of what they measured): the architecture's kind (dense,
  mixture of experts, hybrid Mamba), tokens per device per micro-step (kernels fill the GPU from
  about 8192 tokens; below it efficiency falls), the model width (narrow layers use the tensor cores
  worse), fms-acceleration's fast kernels and fast MoE, full fine-tuning against PEFT.
- Communication per micro-step: FSDP all-gathers every parameter twice (forward, backward) and
  reduce-scatters the trainable gradients; DDP all-reduces the trainable gradients once per optimizer
  step. Across nodes at the fitted bandwidth of RoCE/InfiniBand or of TCP sockets (ado's multi-node rows;
  the busbw a network preflight measures is not used yet); within a node it counts as hidden behind
  compute (the efficiency already holds it).

Limits (docs/measurements.md, "Predicted throughput"): rows are assumed to fill modelMaxLength (padding
computed); the efficiency is fitted on A100-80GB runs of fms-hf-tuning with gradient checkpointing, and
carries their spread (bench/fleet_throughput.py's table: median and 90th-percentile error per family and
GPU count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from ftbench.api import effective
from ftbench.api.api_model import ApiModel
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.catalog.parameters import ParameterCounts, UnknownArchitecture, parameter_counts
from ftbench.contracts.enums import DistributedBackend, TorchDtype
from ftbench.stats.flops import peak_flops, recompute_flops, training_flops

Kind = Literal["dense", "moe", "hybrid"]

# Fitted by `bench/fleet_throughput.py fit` on ../shared/data/ado-fleet/fleet-sample-A.csv (single-node clean
# rows, Huber-weighted least squares of log MFU); docs/benchmarks.md has the fit's error per group.
EFFICIENCY: Final = {
    "dense": -0.315,  # log MFU at 8192 tokens per device per micro-step, width 4096, PEFT, no fast kernels
    "moe": -0.828,
    "hybrid": -0.594,
    "short_dense": 0.518,  # slope of log MFU in log(tokens per micro-step / 8192) below 8192 tokens
    "short_sparse": 0.895,  # the same for mixtures of experts and hybrids
    "long": 0.186,  # the slope above 8192 tokens
    "width": 1.244,  # slope in log(hidden / 4096)
    "fast_kernels": 0.146,
    "fast_moe": 0.153,
    "full": 0.192,
}
SATURATION_TOKENS: Final = 8192
WIDTH: Final = 4096
EFFICIENCY_CAP: Final = 0.9  # no row of the fleet ran above 85 % (hardware FLOPs)
# Inter-node bandwidth per GPU for FSDP's collectives (bytes/s) and the share of it compute hides,
# fitted on the fleet's 2- and 4-node rows (a grid over these values; docs/benchmarks.md).
INTER_NODE_RDMA_BYTES: Final = 40e9
INTER_NODE_TCP_BYTES: Final = 8e9
INTER_NODE_OVERLAP: Final = 0.0


class ThroughputPrediction(ApiModel):
    """Predicted steady throughput of a spec (an estimate: see ftbench.api.throughput for the model)."""

    tokens_per_second_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Predicted steady tokens/s of all devices (padded tokens, rows assumed full length)."
    )
    tokens_per_gpu_per_second_estimate: Annotated[float, Field(ge=0)] = Field(
        description="tokensPerSecondEstimate / numberGpus."
    )
    step_seconds_estimate: Annotated[float, Field(ge=0)] = Field(description="Predicted optimizer step time.")
    mfu_percent_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Predicted model FLOPs utilisation (the measured mfuPercent's accounting)."
    )
    compute_seconds: Annotated[float, Field(ge=0)] = Field(description="Compute per optimizer step.")
    exposed_communication_seconds: Annotated[float, Field(ge=0)] = Field(
        description="Communication per optimizer step that compute does not hide."
    )
    dominant: Literal["compute", "communication"] = Field(description="What takes most of the predicted step.")


def kind_of(counts: ParameterCounts) -> Kind:
    if counts.attention_layers < counts.layers:
        return "hybrid"
    return "moe" if counts.active < counts.total else "dense"


def efficiency_features(
    *, kind: Kind, tokens_per_micro_step: float, hidden: int, fast_kernels: bool, fast_moe: bool, full: bool
) -> dict[str, float]:
    """The efficiency model's inputs (EFFICIENCY's keys): one source for the prediction and the fit."""
    x = math.log(max(tokens_per_micro_step, 1.0) / SATURATION_TOKENS)
    sparse = kind != "dense"
    return {
        "dense": float(kind == "dense"),
        "moe": float(kind == "moe"),
        "hybrid": float(kind == "hybrid"),
        "short_dense": min(x, 0.0) * (not sparse),
        "short_sparse": min(x, 0.0) * sparse,
        "long": max(x, 0.0),
        "width": math.log(hidden / WIDTH),
        "fast_kernels": float(fast_kernels),
        "fast_moe": float(fast_moe),
        "full": float(full),
    }


def efficiency(features: dict[str, float], coefficients: dict[str, float] = EFFICIENCY) -> float:
    return min(EFFICIENCY_CAP, math.exp(sum(coefficients[k] * v for k, v in features.items())))


def _hidden(arch: dict[str, Any]) -> int:
    return int(arch.get("hidden_size") or arch.get("n_embd") or WIDTH)


@dataclass(frozen=True)
class StepModel:
    """What the prediction knows of one optimizer step before the efficiency is applied (bench/fleet.py fits
    the efficiency on these figures, so the fit and the prediction read the same quantities)."""

    features: dict[str, float]
    hardware_flops: float  # per device per optimizer step, recompute included
    model_flops: float  # per device per optimizer step (the measured MFU's accounting)
    peak: float  # FLOP/s of one GPU
    communication: float  # seconds per optimizer step, across nodes
    step_tokens: int  # padded tokens of one optimizer step, all devices

    def predict(self, gpus: int, coefficients: dict[str, float] = EFFICIENCY) -> ThroughputPrediction:
        compute = self.hardware_flops / (self.peak * efficiency(self.features, coefficients))
        exposed = max(0.0, self.communication - INTER_NODE_OVERLAP * compute)
        step = compute + exposed
        return ThroughputPrediction(
            tokens_per_second_estimate=self.step_tokens / step,
            tokens_per_gpu_per_second_estimate=self.step_tokens / step / gpus,
            step_seconds_estimate=step,
            mfu_percent_estimate=100.0 * self.model_flops / step / self.peak,
            compute_seconds=compute,
            exposed_communication_seconds=exposed,
            dominant="communication" if exposed > compute else "compute",
        )


def predict_throughput(spec: FineTuneExperimentSpec, catalog: Catalog) -> ThroughputPrediction | None:
    """None where it cannot be predicted (`why_no_throughput` says why)."""
    model = step_model(spec, catalog)
    return None if model is None else model.predict(max(1, spec.number_gpus))


def step_model(spec: FineTuneExperimentSpec, catalog: Catalog) -> StepModel | None:
    if why_no_throughput(spec, catalog):
        return None
    model = effective.model_of(spec, catalog)
    assert model is not None and model.architecture is not None and spec.gpu_model is not None
    arch = model.architecture
    counts = parameter_counts(arch)
    dtype = effective.torch_dtype(spec, catalog)
    full = effective.experiment_of(spec, catalog).method == "full"
    per_device, length = effective.per_device_batch_size(spec), spec.model_max_length
    tokens = per_device * length
    attention = {"layers": counts.attention_layers, "hidden": counts.attention_width,
                 "length_squared": per_device * length * length}  # fmt: skip
    model_flops = training_flops(parameters=counts.active, trainable=counts.active if full else 0, tokens=tokens,
                                 **attention)  # fmt: skip
    hardware_flops = model_flops
    if spec.gradient_checkpointing:
        hardware_flops += recompute_flops(parameters=counts.active, tokens=tokens, **attention)
    features = efficiency_features(
        kind=kind_of(counts),
        tokens_per_micro_step=tokens,
        hidden=_hidden(arch),
        fast_kernels=bool(spec.fast_kernels and any(spec.fast_kernels)),
        fast_moe=bool(spec.fast_moe),
        full=full,
    )
    micro_steps = spec.gradient_accumulation_steps
    return StepModel(
        features=features,
        hardware_flops=micro_steps * hardware_flops,
        model_flops=micro_steps * model_flops,
        peak=peak_flops(spec.gpu_model, dtype.value),
        communication=micro_steps * _communication_seconds(spec, counts, dtype, full),
        step_tokens=effective.global_batch_size(spec) * length,
    )


def why_no_throughput(spec: FineTuneExperimentSpec, catalog: Catalog) -> str | None:
    """Why a spec's throughput is not predicted, or None."""
    if spec.number_gpus == 0 or effective.uses_cpu(spec):
        return "CPU ranks: the throughput model is fitted on GPUs"
    if not spec.gpu_model or peak_flops(spec.gpu_model, "bfloat16") <= 0:
        return f"gpuModel {spec.gpu_model or '(unset)'} has no data-sheet peak in ftbench.stats.flops"
    model = effective.model_of(spec, catalog)
    if model is None or model.architecture is None:
        return f"model {spec.model} has no architecture in the catalog"
    try:
        parameter_counts(model.architecture)
    except UnknownArchitecture as err:
        return f"model {spec.model}: {err}"
    return None


def _communication_seconds(
    spec: FineTuneExperimentSpec, counts: ParameterCounts, dtype: TorchDtype, full: bool
) -> float:
    """Seconds of collective traffic per micro-step per device (ring algorithms: (n - 1) / n of the data)."""
    n = max(1, spec.number_gpus)
    if n == 1 or spec.number_nodes == 1:
        return 0.0  # within a node it is hidden behind compute: the fitted efficiency holds it
    width = 4 if dtype == TorchDtype.FLOAT32 else 2
    trainable = counts.total if full else 0
    volume: float = (2 * counts.total + trainable) * width
    if effective.distributed_backend(spec) != DistributedBackend.FSDP:
        # DDP all-reduces the gradients once per optimizer step: twice the data, spread over its micro-steps
        volume = 2 * trainable * width / spec.gradient_accumulation_steps
    share = volume * (n - 1) / n
    rdma = spec.enable_roce  # RoCE or InfiniBand between the nodes; otherwise TCP sockets
    return share / (INTER_NODE_RDMA_BYTES if rdma else INTER_NODE_TCP_BYTES)


class RunTimeEstimate(ApiModel):
    """Training time and device-hours the spec's stop settings imply at the predicted step time (an estimate:
    model loading and set-up are not in it; a run stopped by time is bounded by that time)."""

    steps_estimate: Annotated[int, Field(ge=0)] = Field(description="Optimizer steps per run.")
    seconds_estimate: Annotated[float, Field(ge=0)] = Field(
        description="Training seconds of all runs (repeats, trials)."
    )
    gpu_hours_estimate: Annotated[float, Field(ge=0)] = Field(description="seconds x GPUs / 3600.")
    bounded_by: Literal["maxSteps", "epochs", "stopAfterSeconds", "autoStop"] = Field(
        description="The stop setting that ends each run first at the predicted step time."
    )


# ado's WARMUP_60S_STABLE_120S_OR_10_STEPS: at least 60 s of warmup, then the longer of 120 s or 10 steps.
AUTO_STOP_WARMUP_SECONDS: Final = 60.0
AUTO_STOP_STABLE_SECONDS: Final = 120.0
AUTO_STOP_STABLE_STEPS: Final = 10


def run_time(
    spec: FineTuneExperimentSpec, catalog: Catalog, throughput: ThroughputPrediction, rows: int | None = None
) -> RunTimeEstimate:
    """`rows`: the dataset rows an epoch holds (rowsTrained where known), else the catalog's entries."""
    step = throughput.step_seconds_estimate
    fixed = effective.max_steps(spec, catalog)
    bounded: Literal["maxSteps", "epochs", "stopAfterSeconds", "autoStop"]
    if fixed > 0:
        steps, bounded = fixed, "maxSteps"
    else:
        dataset = catalog.datasets.get(spec.dataset_id)
        entries = rows if rows is not None else (dataset.entries if dataset is not None else 0)
        steps = max(1, math.ceil(spec.num_train_epochs * entries / effective.global_batch_size(spec)))
        bounded = "epochs"
    seconds = steps * step
    if spec.auto_stop_method is not None:
        warmup_steps = math.ceil(AUTO_STOP_WARMUP_SECONDS / step)
        stable = max(AUTO_STOP_STABLE_SECONDS, AUTO_STOP_STABLE_STEPS * step)
        auto = warmup_steps * step + math.ceil(stable / step) * step
        if auto < seconds:
            seconds, steps, bounded = auto, round(auto / step), "autoStop"
    if spec.stop_after_seconds > 0 and spec.stop_after_seconds < seconds:
        seconds, steps, bounded = spec.stop_after_seconds, math.ceil(spec.stop_after_seconds / step), "stopAfterSeconds"
    total = seconds * effective.trials(spec, catalog)
    return RunTimeEstimate(
        steps_estimate=steps,
        seconds_estimate=total,
        gpu_hours_estimate=total * max(1, spec.number_gpus) / 3600.0,
        bounded_by=bounded,
    )
