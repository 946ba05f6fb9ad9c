"""Predicted steady throughput of a spec before it runs (an estimate, and named so everywhere it shows).

A step's time is its compute, the framework time each layer costs whatever its FLOPs, and the inter-node
communication that these do not hide:

    compute  = hardware FLOPs per device per optimizer step / (GPU peak x efficiency)
    overhead = micro-steps x (layers x (seconds per layer + seconds of the expert loop)
                              + expert-parallel MoE layers x fastMoe's dispatch stall)
    busy     = compute + overhead
    exposed  = max(0, inter-node communication - busy)
    tokens/s = tokens per optimizer step / (busy + exposed)

All constants (FITTED) are fitted together on ado's fleet sample A (`bench/fleet_throughput.py fit`).

Design notes: docs/design-notes.md, "ftbench/predict/throughput.py".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from ftbench.api import effective
from ftbench.api.prediction_report import RunTimeEstimate, ThroughputPrediction, dominant
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.catalog.parameters import ParameterCounts, UnknownArchitecture, parameter_counts
from ftbench.contracts.enums import DistributedBackend, TorchDtype
from ftbench.predict.constants import EFFICIENCY_CAP, FITTED, SATURATION_TOKENS, LayerCost, ThroughputConstants
from ftbench.stats.flops import gpu_family, peak_flops, recompute_flops, training_flops

Kind = Literal["dense", "moe", "hybrid"]


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
    expert_parallel_layers: int  # MoE layers whose tokens fastMoe dispatches across ranks (0 without)
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
        overhead = self.micro_steps * (self.layers * (constants.layer_seconds[self.layer_cost] + experts) +
                                       self.expert_parallel_layers * constants.expert_parallel_seconds)  # fmt: skip
        communication = self.inter_node_bytes / (constants.rdma_bytes if self.rdma else constants.tcp_bytes)
        return StepSeconds(compute, overhead, max(0.0, communication - compute - overhead))

    def predict(self, gpus: int, constants: ThroughputConstants = FITTED, factor: float = 1.0) -> ThroughputPrediction:
        """`factor`: a calibration's step-time factor for the model (ftbench.predict.calibrate), 1 without one."""
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
        # ScatterMoE's all-to-all needs every MoE layer's token counts on the host (fastMoe 1: no dispatch)
        expert_parallel_layers=counts.layers if spec.fast_moe > 1 and counts.active < counts.total else 0,
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
