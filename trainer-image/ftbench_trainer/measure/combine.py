"""`combine`: every rank's report -> the run's `Metrics`, as one pure function.

All cross-rank formulas live here (docs/measurements.md defines each number): the runtime is the
slowest rank's window, counts are summed over ranks, rates divide by that runtime, per-GPU rates
by max(1, numberGpus), GPU figures are min/avg/max across GPUs of each GPU's mean (seed note 1),
step-time statistics, their batch-means intervals and the noise flags come from rank 0's
measured (steady-state) steps, and MFU from the model's size and the GPU's peak. Nothing
here imports torch or transformers: the callback collects observations, this module does the
arithmetic, so hand-computed multi-rank cases are unit tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ftbench.contracts.quality import IntervalScope, MeasurementQuality
from ftbench.contracts.results import RANK_MEMORY_LIMIT, Metrics, RankMemory
from ftbench.stats.flops import mfu_percent, peak_flops, training_flops
from ftbench.stats.intervals import Interval, mean_interval, rate_interval
from ftbench.stats.noise import HostLoad, WindowFacts, noise_flags
from ftbench.stats.results import steady_interval_fields
from ftbench_trainer.measure.system import GpuSummary
from ftbench_trainer.measure.timing import coefficient_of_variation, percentile
from ftbench_trainer.measure.window import StepWindow


@dataclass(frozen=True)
class RankReport:
    """What one rank contributes to the final metrics (gathered once at the end of training)."""

    window: StepWindow = field(default_factory=StepWindow)
    cpu_percent: float = 0.0
    cpu_memory_percent: float = 0.0
    node_memory_percent: float = 0.0
    host: HostLoad = field(default_factory=HostLoad)
    gpus: tuple[GpuSummary, ...] = ()
    gpu_name: str = ""
    max_memory_allocated: int = 0
    max_memory_reserved: int = 0
    peak_rss: int = 0
    tensor_peak: int = 0  # CPU ranks: the steady-state step's peak tensor storage (measure.tensor_peak)
    peak_batch: tuple[int, int] = (0, 0)  # (rows, padded length) of the largest micro-batch the peak was measured over
    uncounted_forwards: int = 0
    # This rank's tensors (measure.shards): parameters between steps, gradients at the optimizer
    # step, optimizer state after it; local shards only, so FSDP's split shows rank by rank.
    parameter_bytes: int = 0
    gradient_bytes: int = 0
    optimizer_state_bytes: int = 0
    setup_seconds: float = 0.0  # this rank's process start to its first step (rank 0's is the run's)


@dataclass(frozen=True)
class ModelSize:
    """What the FLOP count needs of the model (parameters summed over FSDP1 shards)."""

    parameters: int = 0
    trainable: int = 0
    layers: int = 0
    hidden: int = 0
    parameter_bytes: int = 0  # all parameters, unsharded


@dataclass(frozen=True)
class RunFacts:
    """What every rank knows alike: from the plan, the model and the stop controls, not sampled."""

    number_gpus: int
    torch_dtype: str
    dataset_tokens_per_sample: float | None  # None: the dataset has no single text field (seed note 3)
    model: ModelSize = field(default_factory=ModelSize)
    stopped_by: str = "completed"
    planned_steps: int = 0  # the Trainer's planned total (0: unknown)
    rows_offered: int | None = None  # the dataset file's rows (ftbench_trainer.measure.rows)
    rows_trained: int | None = None  # the engine's training rows that keep a trained token


def combine(reports: Sequence[RankReport], run: RunFacts) -> Metrics:
    """The run's metrics from every rank's report (rank order; at least one report)."""
    r0 = reports[0].window
    windows = [r.window for r in reports]
    runtime = max(w.runtime for w in windows)
    steps = len(r0.step_times)
    samples = sum(w.samples for w in windows)
    tokens = sum(w.padded_tokens for w in windows)
    gpus = max(1, run.number_gpus)

    def rate(x: float, seconds: float = runtime) -> float:
        return x / seconds if seconds > 0 else 0.0

    gpu = [g for r in reports for g in r.gpus]
    flops = training_flops(
        parameters=run.model.parameters,
        trainable=run.model.trainable,
        tokens=tokens,
        layers=run.model.layers,
        hidden=run.model.hidden,
        length_squared=sum(w.padded_length_squared for w in windows),
    )
    peak = peak_flops(reports[0].gpu_name, run.torch_dtype)
    tokens_per_second = rate(tokens)
    per_sample = run.dataset_tokens_per_sample
    dataset_tps = None if per_sample is None else rate(samples * per_sample)
    steady_seconds = max(w.steady_seconds for w in windows)
    steady = rate(sum(w.steady_tokens for w in windows), steady_seconds)
    measured = r0.steady_step_times
    # Rank 0's series sets the relative width; all ranks step together, so it holds for their sum.
    relative = rate_interval(r0.steady_step_tokens, measured)
    throughput = relative.scaled(steady / relative.estimate) if relative and relative.estimate else None
    step_time = mean_interval(measured)
    cv = coefficient_of_variation(measured)
    flags = noise_flags(
        WindowFacts(
            measured_steps=len(measured),
            measured_seconds=sum(measured),
            has_interval=throughput is not None,
            step_time_cv=cv,
            host=HostLoad(
                steal_percent=max(r.host.steal_percent for r in reports),
                contended_threads=max(r.host.contended_threads for r in reports),
            ),
            gpu_throttled_fraction=max((g.throttled_fraction for g in gpu), default=0.0),
        )
    )
    return Metrics(
        **gpu_spread(gpu),  # type: ignore[arg-type]  # floats only; mypy checks them against every field
        gpu_memory_utilization_peak_percent=max((g.memory_peak_percent for g in gpu), default=None),
        gpu_max_memory_allocated_bytes=max(r.max_memory_allocated for r in reports) or None,  # 0: no CUDA
        gpu_max_memory_reserved_bytes=max(r.max_memory_reserved for r in reports) or None,
        cpu_peak_rss_bytes=max(r.peak_rss for r in reports),
        cpu_tensor_peak_bytes=max(r.tensor_peak for r in reports),
        peak_batch_shape=_largest_batch(reports),
        cpu_compute_utilization_percent=_avg([r.cpu_percent for r in reports]),
        cpu_memory_utilization_percent=_avg([r.cpu_memory_percent for r in reports]),
        node_memory_used_percent=_avg([r.node_memory_percent for r in reports]),
        train_runtime_seconds=runtime,
        train_steps=steps,
        train_samples=samples,
        rows_offered=run.rows_offered,
        rows_trained=run.rows_trained,
        train_tokens=tokens,
        train_non_padding_tokens=sum(w.non_padding_tokens for w in windows),
        train_non_padding_tokens_per_step=sum(w.non_padding_tokens for w in windows) / steps if steps else 0.0,
        train_samples_per_second=rate(samples),
        train_steps_per_second=rate(steps),
        train_tokens_per_second=tokens_per_second,
        train_tokens_per_gpu_per_second=tokens_per_second / gpus,
        dataset_tokens_per_second=dataset_tps,
        dataset_tokens_per_second_per_gpu=None if dataset_tps is None else dataset_tps / gpus,
        step_time_p50_seconds=percentile(measured, 50),
        step_time_p95_seconds=percentile(measured, 95),
        step_time_cv=cv,
        steady_state_tokens_per_second=steady,
        warmup_excluded_seconds=r0.warmup_seconds,
        warmup_steps=r0.steady_start,
        measured_steps=len(measured),
        measured_seconds=sum(measured),
        step_time_mean_seconds=step_time.estimate if step_time else 0.0,
        step_time_mean_ci95_low_seconds=_low(step_time),
        step_time_mean_ci95_high_seconds=_high(step_time),
        noise_flags=flags,
        measurement_quality=MeasurementQuality.FLAGGED if flags else MeasurementQuality.CLEAN,
        mfu_percent=mfu_percent(flops, runtime, run.number_gpus, peak),
        gpu_peak_flops=peak or None,
        train_model_flops=flops,
        model_parameters=run.model.parameters,
        trainable_parameters=run.model.trainable,
        model_parameter_bytes=run.model.parameter_bytes,
        rank_memory=[
            RankMemory(
                rank=i,
                parameter_bytes=r.parameter_bytes,
                gradient_bytes=r.gradient_bytes,
                optimizer_state_bytes=r.optimizer_state_bytes,
            )
            for i, r in enumerate(reports[:RANK_MEMORY_LIMIT])
        ],
        stopped_by=run.stopped_by,
        devices=max(run.number_gpus, len(reports)),
        setup_seconds=reports[0].setup_seconds,
        train_steps_planned=run.planned_steps,
    ).model_copy(update=steady_interval_fields(throughput, IntervalScope.WITHIN_RUN))


def _low(interval: Interval | None) -> float | None:
    """The interval's lower end, never below 0 (a rate or a time cannot be negative)."""
    return max(0.0, interval.low) if interval else None


def _high(interval: Interval | None) -> float | None:
    return interval.high if interval else None


def _avg(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# Metrics field stem, GpuSummary attribute, unit suffix.
_GPU_FIELDS = (
    ("gpu_compute_utilization", "compute_percent", "percent"),
    ("gpu_memory_utilization", "memory_percent", "percent"),
    ("gpu_power", "power_percent", "percent"),
    ("gpu_power", "power_watts", "watts"),
)


def gpu_spread(gpus: Sequence[GpuSummary]) -> dict[str, float]:
    """Seed note 1: min/avg/max across GPUs of each GPU's mean over the run (nothing without GPUs: the
    fields stay absent, never a measured-looking 0)."""
    out: dict[str, float] = {}
    if not gpus:
        return out
    for stem, attr, unit in _GPU_FIELDS:
        values = [getattr(g, attr) for g in gpus]
        out[f"{stem}_min_{unit}"] = min(values, default=0.0)
        out[f"{stem}_avg_{unit}"] = _avg(values)
        out[f"{stem}_max_{unit}"] = max(values, default=0.0)
    return out


def _largest_batch(reports: Sequence[RankReport]) -> list[int] | None:
    """The largest micro-batch any rank's tensor peak was measured over (None: none recorded)."""
    rows, length = max((r.peak_batch for r in reports), key=lambda b: b[0] * b[1], default=(0, 0))
    return [rows, length] if rows * length else None
