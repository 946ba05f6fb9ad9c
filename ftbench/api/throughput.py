"""Predicted steady throughput of a spec before it runs (an estimate, and named so everywhere it shows).

A step's time is its compute, the framework time each layer costs whatever its FLOPs, and the inter-node
communication that these do not hide:

    compute  = hardware FLOPs per device per optimizer step / (GPU peak x efficiency)
    overhead = micro-steps x layers x (seconds per layer + seconds of the expert loop)
    busy     = compute + overhead
    exposed  = max(0, inter-node communication - busy)
    tokens/s = tokens per optimizer step / (busy + exposed)

All constants (FITTED) are fitted together on ado's fleet sample A (`bench/fleet_throughput.py fit`).

Design notes: docs/design-notes.md, "ftbench/api/throughput.py".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Final, Literal

from pydantic import Field

from ftbench.api import effective
from ftbench.api.api_model import ApiModel
from ftbench.api.fleet_accuracy import ThroughputAccuracy
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.catalog.parameters import ParameterCounts, UnknownArchitecture, parameter_counts
from ftbench.contracts.enums import DistributedBackend, TorchDtype
from ftbench.stats.flops import gpu_family, peak_flops, recompute_flops, training_flops

Kind = Literal["dense", "moe", "hybrid"]
LayerCost = Literal["one_gpu_full", "one_gpu_peft", "sharded_full", "sharded_peft"]

SATURATION_TOKENS: Final = 8192
EFFICIENCY_CAP: Final = 0.9  # no row of the fleet ran above 85 % (hardware FLOPs)


@dataclass(frozen=True)
class ThroughputConstants:
    """The model's free constants (one value each; `bench/fleet_throughput.py fit` varies them)."""

    efficiency: Mapping[str, float]  # coefficients of log efficiency (efficiency_features' keys)
    layer_seconds: Mapping[LayerCost, float]  # per layer per micro-step: 1 GPU or sharded, full or PEFT
    expert_seconds: float  # per routed expert per layer per micro-step, without fast MoE kernels
    expert_token_seconds: float  # the same per token of the micro-step
    expert_full_factor: float  # how much dearer the expert loop is when the experts train
    rdma_bytes: float  # inter-node bytes/s per GPU for FSDP's collectives over RoCE/InfiniBand
    tcp_bytes: float  # the same over TCP sockets
    # The efficiency of a GPU family against the fleet's A100s (1 where ftbench has no figures of its own)
    gpu_efficiency: Mapping[str, float] = field(default_factory=dict)


# Fitted by `bench/fleet_throughput.py fit` on ../shared/data/ado-fleet/fleet-sample-A.csv (every clean row that
# ran); tests/unit/test_throughput.py holds these to the fit, docs/benchmarks.md has its error per group.
FITTED: Final = ThroughputConstants(
    efficiency={
        "dense": -0.315,  # log efficiency at 8192 tokens per device per micro-step, PEFT, no fast kernels
        "moe": -0.398,
        "hybrid": -0.252,
        "long": -0.089,  # slope in log(tokens per micro-step / 8192) above 8192 (attention's share grows)
        "fast_kernels": 0.208,
        "fast_moe": -0.877,
        "full": 0.028,
    },
    layer_seconds={"one_gpu_full": 7.3e-3, "one_gpu_peft": 7.6e-3, "sharded_full": 13e-3, "sharded_peft": 23e-3},
    expert_seconds=2.2e-4,
    expert_token_seconds=1.8e-8,
    expert_full_factor=2.5,
    rdma_bytes=61e9,
    tcp_bytes=7.2e9,
    # ftbench's own runs on lent GPUs (bench/fleet_throughput.py own: llama-7b at 8 x 2048 on one GPU)
    gpu_efficiency={"H100": 0.823, "H200": 0.883},
)


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
    overhead_seconds: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="Per-layer framework time per optimizer step that does not scale with FLOPs (kernel "
        "launches, FSDP's hooks, a mixture of experts' loop over its experts).",
    )
    exposed_communication_seconds: Annotated[float, Field(ge=0)] = Field(
        description="Communication per optimizer step that compute does not hide."
    )
    dominant: Literal["compute", "overhead", "communication"] = Field(
        description="What takes most of the predicted step."
    )
    inter_node_bytes_per_gpu: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Bytes each GPU moves across nodes per optimizer step in the collectives (0 on one node): "
        "divided by a measured bus bandwidth, the communication time.",
    )
    accuracy: ThroughputAccuracy | None = Field(
        None,
        description="How sure tokensPerSecondEstimate is: its out-of-sample error on ado's fleet rows like this run "
        "(grouped folds, or a model left out where the fleet lacks the model; widened outside the calibration).",
    )

    def with_bus_bandwidth(self, bytes_per_second: float) -> ThroughputPrediction:
        """The same step with the inter-node communication at a measured bus bandwidth (the network
        preflight's allGather busbw, nccl-tests' convention: bytes x (n - 1) / n per second)."""
        if self.inter_node_bytes_per_gpu <= 0 or bytes_per_second <= 0:
            return self
        tokens = self.tokens_per_second_estimate * self.step_seconds_estimate
        busy = self.compute_seconds + self.overhead_seconds
        exposed = max(0.0, self.inter_node_bytes_per_gpu / bytes_per_second - busy)
        step = busy + exposed
        return self.model_copy(update={
            "tokens_per_second_estimate": tokens / step,
            "tokens_per_gpu_per_second_estimate": self.tokens_per_gpu_per_second_estimate * self.step_seconds_estimate
            / step,
            "step_seconds_estimate": step,
            "mfu_percent_estimate": self.mfu_percent_estimate * self.step_seconds_estimate / step,
            "exposed_communication_seconds": exposed,
            "dominant": dominant(self.compute_seconds, self.overhead_seconds, exposed),
        })  # fmt: skip


def dominant(compute: float, overhead: float, exposed: float) -> Literal["compute", "overhead", "communication"]:
    """What takes most of a step."""
    if exposed > max(compute, overhead):
        return "communication"
    return "overhead" if overhead > compute else "compute"


def kind_of(counts: ParameterCounts) -> Kind:
    if counts.attention_layers < counts.layers:
        return "hybrid"
    return "moe" if counts.active < counts.total else "dense"


def efficiency_features(
    *, kind: Kind, tokens_per_micro_step: float, fast_kernels: bool, fast_moe: bool, full: bool
) -> dict[str, float]:
    """The efficiency model's inputs (FITTED.efficiency's keys): one source for the prediction and the fit."""
    return {
        "dense": float(kind == "dense"),
        "moe": float(kind == "moe"),
        "hybrid": float(kind == "hybrid"),
        "long": max(math.log(max(tokens_per_micro_step, 1.0) / SATURATION_TOKENS), 0.0),
        "fast_kernels": float(fast_kernels),
        "fast_moe": float(fast_moe),
        "full": float(full),
    }


def efficiency(features: Mapping[str, float], coefficients: Mapping[str, float]) -> float:
    return min(EFFICIENCY_CAP, math.exp(sum(coefficients[k] * v for k, v in features.items())))


@dataclass(frozen=True)
class StepSeconds:
    compute: float
    overhead: float
    exposed: float

    @property
    def step(self) -> float:
        return self.compute + self.overhead + self.exposed


@dataclass(frozen=True)
class StepModel:
    """What the prediction knows of one optimizer step before the constants are applied (bench/fleet_throughput.py
    fits the constants on these figures, so the fit and the prediction read the same quantities)."""

    features: dict[str, float]
    hardware_flops: float  # per device per optimizer step, recompute included
    model_flops: float  # per device per optimizer step (the measured MFU's accounting)
    peak: float  # FLOP/s of one GPU
    step_tokens: int  # padded tokens of one optimizer step, all devices
    micro_steps: int
    layers: int
    layer_cost: LayerCost
    experts_looped: int  # routed experts transformers loops over (0: dense, or fast MoE kernels)
    tokens_per_micro_step: int  # per device
    full: bool
    inter_node_bytes: float  # per device per optimizer step (0 on one node)
    rdma: bool
    gpu_family: str = ""  # ftbench.stats.flops.gpu_family

    def seconds(self, constants: ThroughputConstants = FITTED) -> StepSeconds:
        reached = efficiency(self.features, constants.efficiency) * constants.gpu_efficiency.get(self.gpu_family, 1.0)
        compute = self.hardware_flops / (self.peak * reached)
        experts = self.experts_looped * (constants.expert_seconds + self.tokens_per_micro_step *
                                         constants.expert_token_seconds)  # fmt: skip
        if self.full:
            experts *= constants.expert_full_factor
        overhead = self.micro_steps * self.layers * (constants.layer_seconds[self.layer_cost] + experts)
        communication = self.inter_node_bytes / (constants.rdma_bytes if self.rdma else constants.tcp_bytes)
        return StepSeconds(compute, overhead, max(0.0, communication - compute - overhead))

    def predict(self, gpus: int, constants: ThroughputConstants = FITTED, factor: float = 1.0) -> ThroughputPrediction:
        """`factor`: a calibration's step-time factor for the model (ftbench.api.calibrate), 1 without one."""
        s = self.seconds(constants)
        t = StepSeconds(s.compute * factor, s.overhead * factor, s.exposed * factor)
        return ThroughputPrediction(
            tokens_per_second_estimate=self.step_tokens / t.step,
            tokens_per_gpu_per_second_estimate=self.step_tokens / t.step / gpus,
            step_seconds_estimate=t.step,
            mfu_percent_estimate=100.0 * self.model_flops / t.step / self.peak,
            compute_seconds=t.compute,
            overhead_seconds=t.overhead,
            exposed_communication_seconds=t.exposed,
            dominant=dominant(t.compute, t.overhead, t.exposed),
            inter_node_bytes_per_gpu=self.inter_node_bytes,
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
    fast_moe = bool(spec.fast_moe)
    features = efficiency_features(
        kind=kind_of(counts),
        tokens_per_micro_step=tokens,
        fast_kernels=bool(spec.fast_kernels and any(spec.fast_kernels)),
        fast_moe=fast_moe,
        full=full,
    )
    micro_steps = spec.gradient_accumulation_steps
    sharded = max(1, spec.number_gpus) > 1
    cost: LayerCost = f"{'sharded' if sharded else 'one_gpu'}_{'full' if full else 'peft'}"  # type: ignore[assignment]
    experts = 0 if fast_moe else int(arch.get("num_local_experts") or 0)
    return StepModel(
        features=features,
        hardware_flops=micro_steps * hardware_flops,
        model_flops=micro_steps * model_flops,
        peak=peak_flops(spec.gpu_model, dtype.value),
        step_tokens=effective.global_batch_size(spec) * length,
        micro_steps=micro_steps,
        layers=counts.layers,
        layer_cost=cost,
        experts_looped=experts,
        tokens_per_micro_step=tokens,
        full=full,
        inter_node_bytes=micro_steps * _inter_node_bytes(spec, counts, dtype, full),
        rdma=spec.enable_roce,
        gpu_family=gpu_family(spec.gpu_model),
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


def _inter_node_bytes(spec: FineTuneExperimentSpec, counts: ParameterCounts, dtype: TorchDtype, full: bool) -> float:
    """Bytes of collective traffic per micro-step per device across nodes (ring algorithms: (n - 1) / n of the
    data); 0 on one node, where NVLink's share is in the fitted overhead."""
    n = max(1, spec.number_gpus)
    if n == 1 or spec.number_nodes == 1:
        return 0.0
    width = 4 if dtype == TorchDtype.FLOAT32 else 2
    trainable = counts.total if full else 0
    volume: float = (2 * counts.total + trainable) * width
    if effective.distributed_backend(spec) != DistributedBackend.FSDP:
        # DDP all-reduces the gradients once per optimizer step: twice the data, spread over its micro-steps
        volume = 2 * trainable * width / spec.gradient_accumulation_steps
    return volume * (n - 1) / n


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
