"""The trainer's result: one versioned schema read by the operator, the CLI and the results store.

The metric names are seed 001's measured properties in camelCase with the unit at the end
(`gpu_compute_utilization_min` -> `gpuComputeUtilizationMinPercent`). docs/measurements.md gives
each one's exact definition. The same `Metrics` model is the `status.results` schema of the CRD.
What actually ran beside the metrics (versions, FSDP / DeepSpeed in effect) is
ftbench.contracts.environment; the network preflight's part of it, ftbench.contracts.network; how sure
the metrics are (noise flags, the interval's scope), ftbench.contracts.quality.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from ftbench.contracts.bounded import BoundedMessage, BoundedName, BoundedReason
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.numbers import Count, NonNegative, Percent
from ftbench.contracts.quality import IntervalScope, MeasurementQuality, NoiseFlag
from ftbench.contracts.wire import WireModel

RESULT_SCHEMA_VERSION = "ftbench.io/result/v1"

# The trainer prints each result once on stdout as `FTBENCH_RESULT <compact JSON>`, the log's
# machine-readable end (`ftbench run` reads it, next to the progress lines of contracts.progress).
RESULT_PREFIX = "FTBENCH_RESULT"

# Kubernetes truncates termination messages at 4096 bytes.
TERMINATION_MESSAGE_LIMIT = 4096


class Outcome(StrEnum):
    """How one training run ended. GPU_OOM is a *valid measurement* (the config does not fit)."""

    SUCCEEDED = "Succeeded"
    GPU_OOM = "GpuOom"
    FAILED = "Failed"
    # The network preflight showed what spec.run.requireRoce refuses (no RoCE): nothing was trained.
    NETWORK_UNFIT = "NetworkUnfit"


# Exit codes of ftbench-trainer, so a pod's exit code alone classifies the run (and a
# podFailurePolicy can act on OOM without reading the message).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID_PLAN = 2
EXIT_GPU_OOM = 42
EXIT_NETWORK_UNFIT = 43

# The reason of a run refused because the environment holds another fms-hf-tuning release.
REASON_ENGINE_MISMATCH = "EngineMismatch"
# The reason of a run that only checked the network (spec.run.networkPreflight only): it succeeded
# with status.environment.network and no metrics, since nothing was trained.
REASON_NETWORK_CHECKED = "NetworkChecked"
# The reason of a run whose dataset, as the engine prepared and truncated it, keeps fewer rows with a
# trained token than one optimizer step takes: refused before the first step (Failed, nothing trained).
REASON_TOO_FEW_TRAINED_ROWS = "TooFewTrainedRows"

# Ranks whose shard sizes a result lists, and logged losses it keeps (the termination message holds 4 KiB in all).
RANK_MEMORY_LIMIT = 16
LOSS_CURVE_LIMIT = 16


class RankMemory(WireModel):
    """One rank's tensors, counted from the running model and optimizer (local shards only)."""

    rank: Count = Field(description="Global rank (0 is the main process).")
    parameter_bytes: Count = Field(
        description="Bytes of the parameters this rank holds between steps (its shards under FSDP)."
    )
    gradient_bytes: Count = Field(
        description="Bytes of the gradients this rank holds when the optimizer steps (first step)."
    )
    optimizer_state_bytes: Count = Field(
        description="Bytes of the optimizer state this rank holds after the first step."
    )


class Metrics(WireModel):
    """Measured properties of one successful run (seed 001 plus ftbench's extras)."""

    # GPU: absent (None) where no GPU was used, so nothing reads as a measured 0 (the seed's 0.0 is what
    # ado's names carry in `ftbench results --names ado`). Each GPU is averaged over the run; min/avg/max
    # are taken across GPUs (seed note 1).
    gpu_compute_utilization_min_percent: Percent | None = Field(
        None, description="Least busy GPU's mean compute utilization."
    )
    gpu_compute_utilization_avg_percent: Percent | None = Field(
        None, description="Mean over GPUs of mean compute utilization."
    )
    gpu_compute_utilization_max_percent: Percent | None = Field(
        None, description="Busiest GPU's mean compute utilization."
    )
    gpu_memory_utilization_min_percent: Percent | None = Field(
        None, description="Lowest per-GPU mean memory used / total."
    )
    gpu_memory_utilization_avg_percent: Percent | None = Field(
        None, description="Mean over GPUs of mean memory used / total."
    )
    gpu_memory_utilization_max_percent: Percent | None = Field(
        None, description="Highest per-GPU mean memory used / total."
    )
    gpu_memory_utilization_peak_percent: Percent | None = Field(
        None, description="Highest memory used / total seen on any GPU at any sample."
    )
    gpu_power_min_percent: Percent | None = Field(
        None, description="Lowest per-GPU mean power as % of the enforced limit."
    )
    gpu_power_avg_percent: Percent | None = Field(
        None, description="Mean over GPUs of mean power as % of the enforced limit."
    )
    gpu_power_max_percent: Percent | None = Field(
        None, description="Highest per-GPU mean power as % of the enforced limit."
    )
    gpu_power_min_watts: NonNegative | None = Field(None, description="Lowest per-GPU mean power draw.")
    gpu_power_avg_watts: NonNegative | None = Field(None, description="Mean over GPUs of mean power draw.")
    gpu_power_max_watts: NonNegative | None = Field(None, description="Highest per-GPU mean power draw.")
    gpu_max_memory_allocated_bytes: Count | None = Field(
        None, description="Largest torch.cuda.max_memory_allocated() over ranks."
    )
    gpu_max_memory_reserved_bytes: Count | None = Field(
        None, description="Largest torch.cuda.max_memory_reserved() over ranks."
    )
    cpu_peak_rss_bytes: Count = Field(
        0,
        description="Largest peak resident set size of a training process (getrusage ru_maxrss, from its start: "
        "loading included): the memory figure of CPU runs, where the GPU ones are absent.",
    )
    # Tensor memory, the quantity the memory predictor predicts (docs/measurements.md, "Predicted memory").
    cpu_tensor_peak_bytes: Count = Field(
        0,
        description="CPU runs: the largest rank's peak live tensor storage in a steady-state step (what "
        "max_memory_allocated counts on a GPU), counted on the first optimizer step by the predictor's tracker "
        "with the optimizer state it leaves added to the forward and backward; 0 on GPUs (see "
        "gpuMaxMemoryAllocatedBytes), with warmupSteps 0 (the first step is then measured for throughput) and where the "
        "optimizer takes no step hooks (DeepSpeed).",
    )
    # A list, not a tuple: a CRD's structural schema has no prefixItems.
    peak_batch_shape: Annotated[list[Count], Field(min_length=2, max_length=2)] | None = Field(
        None,
        description="[rows, padded length] of the largest micro-batch (input_ids) in the steps the tensor peak was "
        "measured over: the first optimizer step on CPU, every step on GPUs (the longest of any rank).",
    )
    predicted_peak_bytes: Count | None = Field(
        None,
        description="Estimate, not measured: the memory predictor's peak tensor memory per device for this run's "
        "plan at peakBatchShape (ftbench predict, which assumes every row at modelMaxLength, answers for the worst "
        "batch instead), traced after training; unset where it could not be made.",
    )
    prediction_error_percent: float | None = Field(
        None,
        description="(predictedPeakBytes - measured) / measured x 100, measured being gpuMaxMemoryAllocatedBytes "
        "on GPUs and cpuTensorPeakBytes on CPU: how far the prediction was off for this run (positive: over).",
    )
    predicted_gpu_memory_peak_percent: Percent | None = Field(
        None,
        description="Estimate, not measured: the device-level peak as NVML counts it (tensors, CUDA context, allocator "
        'reserve, communication; docs/measurements.md "Device memory") predicted for this run at peakBatchShape, as '
        "a percentage of the GPU's memory; unset on CPU ranks.",
    )
    gpu_memory_prediction_error_points: float | None = Field(
        None,
        description="predictedGpuMemoryPeakPercent - gpuMemoryUtilizationPeakPercent, in percentage points of the "
        "card: how far the device-level prediction was off for this run (positive: over).",
    )
    # CPU (seed note 2): the training process, 100 = one full core.
    cpu_compute_utilization_percent: Percent = Field(0.0, description="Mean CPU use of the training processes.")
    cpu_memory_utilization_percent: Percent = Field(
        0.0, description="Mean resident memory of the training processes as % of the node's memory."
    )
    # Beside seed note 2: the node's whole memory use, the quantity ado reports as cpu_memory_utilization.
    node_memory_used_percent: Percent = Field(
        0.0,
        description="Mean memory in use on the training processes' nodes by every process, as % of the "
        "node's memory (psutil virtual_memory().percent): the quantity ado reports as cpu_memory_utilization.",
    )
    # Throughput.
    train_runtime_seconds: NonNegative = Field(
        description="From the start of the first measured step to the end of the last one."
    )
    train_steps: Count = Field(description="Optimizer steps measured.")
    train_samples: Count = Field(description="Samples processed by all ranks in measured steps.")
    rows_offered: Count | None = Field(
        None, description="Rows of the dataset file given to the engine (absent: not counted, e.g. image rows)."
    )
    rows_trained: Count | None = Field(
        None,
        description="Rows of the engine's own training set that keep at least one trained token after truncation, "
        "counted before the first step by the engine's own data collator: an epoch is this many rows where the engine "
        "drops the others (trl 1.x), and rowsOffered - rowsTrained rows cost compute but teach nothing where it keeps "
        "them (fms-hf-tuning). Absent: not counted (image rows).",
    )
    train_tokens: Count = Field(
        description="Tokens (padding included) processed by all ranks in measured steps, counted per batch."
    )
    train_non_padding_tokens: Count = Field(
        description="Tokens excluding padding processed by all ranks in measured steps."
    )
    train_non_padding_tokens_per_step: NonNegative = Field(
        0.0,
        description="trainNonPaddingTokens / trainSteps: the real tokens one optimizer step carried (with packing, "
        "every token is real and a step carries more samples).",
    )
    train_samples_per_second: NonNegative = Field(description="trainSamples / trainRuntimeSeconds.")
    train_steps_per_second: NonNegative = Field(description="trainSteps / trainRuntimeSeconds.")
    train_tokens_per_second: NonNegative = Field(description="trainTokens / trainRuntimeSeconds (all ranks).")
    train_tokens_per_gpu_per_second: NonNegative = Field(description="trainTokensPerSecond / max(1, numberGpus).")
    dataset_tokens_per_second: NonNegative | None = Field(
        description="Dataset tokens per second: each sample counts min(len(tokens), "
        "tokenizer.model_max_length, max_seq_length) (seed note 3); null where the rows have no single text "
        "field to count (chat, vision)."
    )
    dataset_tokens_per_second_per_gpu: NonNegative | None = Field(
        description="datasetTokensPerSecond / max(1, numberGpus); null with it."
    )
    # Beyond the seeds.
    step_time_p50_seconds: NonNegative = Field(0.0, description="Median measured (steady-state) step time.")
    step_time_p95_seconds: NonNegative = Field(0.0, description="95th percentile measured step time.")
    step_time_cv: NonNegative = Field(
        0.0, description="Coefficient of variation of the measured step times (stdev / mean)."
    )
    steady_state_tokens_per_second: NonNegative = Field(
        0.0,
        description="trainTokensPerSecond over the measured steps: after warmupSteps (unset: the first 10% of "
        "steps, at least 1).",
    )
    warmup_excluded_seconds: NonNegative = Field(
        0.0, description="Training time excluded from the metrics by autoStopMethod's warmup."
    )
    # How sure the numbers are (docs/measurements.md "How sure a number is"; ftbench.stats).
    warmup_steps: Count = Field(
        0, description="Steps at the start of the window left out of the steady state (spec warmupSteps, else 10%)."
    )
    measured_steps: Count = Field(
        0, description="Steady-state steps measured: the steady throughput, step times and intervals rest on them."
    )
    measured_seconds: NonNegative = Field(0.0, description="Wall-clock seconds of the steady-state steps.")
    steady_state_tokens_per_second_ci95_low: NonNegative | None = Field(
        None,
        description="Lower end of the 95% confidence interval of steadyStateTokensPerSecond (batch means over "
        "rank 0's steps); unset when fewer than 4 steps were measured.",
    )
    steady_state_tokens_per_second_ci95_high: NonNegative | None = Field(
        None, description="Upper end of the 95% confidence interval of steadyStateTokensPerSecond."
    )
    throughput_ci95_relative: NonNegative | None = Field(
        None,
        description="Half-width / estimate of that interval: the +- fraction of every per-second rate of the "
        "steady window (per GPU and MFU alike).",
    )
    throughput_ci95_percent: NonNegative | None = Field(
        None, description="throughputCi95Relative in percent (the +- a column shows), rounded to 0.01."
    )
    throughput_ci95_scope: IntervalScope | None = Field(
        None,
        description="Which kind of sure the interval is: withinRun (batch means over one run's steps; a repeat "
        "lands elsewhere more often than it says, so repeat to confirm) or acrossRepeats (fresh processes).",
    )
    step_time_mean_seconds: NonNegative = Field(0.0, description="Mean of the measured step times.")
    step_time_mean_ci95_low_seconds: NonNegative | None = Field(
        None, description="Lower end of the 95% confidence interval of stepTimeMeanSeconds (batch means)."
    )
    step_time_mean_ci95_high_seconds: NonNegative | None = Field(
        None, description="Upper end of the 95% confidence interval of stepTimeMeanSeconds."
    )
    noise_flags: Annotated[list[NoiseFlag], Field(max_length=len(NoiseFlag))] = Field(
        default_factory=list,
        description="Why the measurement may not be trusted as it stands: shortWindow, highStepTimeCv, "
        "hostContention, gpuThrottled (rules in docs/measurements.md); empty for a clean measurement.",
    )
    measurement_quality: MeasurementQuality = Field(
        MeasurementQuality.CLEAN, description="clean without noise flags, flagged with any."
    )
    mfu_percent: NonNegative | None = Field(
        None,
        description="Model FLOPs utilization: 100 x trainModelFlops / trainRuntimeSeconds / (numberGpus x "
        "gpuPeakFlops); absent where gpuPeakFlops is (CPU ranks, a GPU without a known peak). Formula in "
        "docs/measurements.md.",
    )
    gpu_peak_flops: NonNegative | None = Field(
        None,
        description="The peak dense FLOP/s of one GPU that mfuPercent divides by: the vendor data sheet's "
        "tensor-core figure for the GPU's name and torchDtype (docs/measurements.md). Absent on CPU and for a GPU "
        "ftbench has no figure for (mfuPercent is then absent too; trainModelFlops lets you divide by your own).",
    )
    train_model_flops: NonNegative = Field(
        0.0,
        description="Model FLOPs of all ranks' measured steps (PaLM's accounting, from padded tokens; "
        "recomputation not counted): the numerator of mfuPercent.",
    )
    model_parameters: Count = Field(0, description="Parameters of the model.")
    trainable_parameters: Count = Field(0, description="Parameters being trained.")
    model_parameter_bytes: Count = Field(
        0, description="Bytes of all the model's parameters, unsharded (in the dtype they are stored in)."
    )
    rank_memory: Annotated[list[RankMemory], Field(max_length=RANK_MEMORY_LIMIT)] = Field(
        default_factory=list,
        description=f"Per-rank parameter, gradient and optimizer-state bytes (the first {RANK_MEMORY_LIMIT} ranks); "
        "under FULL_SHARD each holds about 1/N of modelParameterBytes.",
    )
    loss_curve: Annotated[list[float], Field(max_length=LOSS_CURVE_LIMIT)] = Field(
        default_factory=list,
        description=f"Training loss as the Trainer logged it (mean over ranks) for the first {LOSS_CURVE_LIMIT} "
        "optimizer steps, 6 significant digits: compares runs of the same work on different ranks or backends.",
    )
    # Device time (issue 47): the facts its split rests on (ftbench.stats.device_time derives the split).
    devices: Count = Field(
        0, description="Devices the run held: its GPUs (numberGpus), or its ranks on CPU (one process each)."
    )
    setup_seconds: NonNegative = Field(
        0.0,
        description="Seconds from the trainer's start (rank 0's process) to its first step: loading the model and "
        "data, building the engine. Device time before training; scheduling and image pulls are not in it.",
    )
    train_steps_planned: Count = Field(
        0, description="Optimizer steps the Trainer planned (maxSteps, or the epochs' steps); 0 when unknown."
    )
    stopped_by: BoundedReason = Field(
        "completed",
        description="What ended training: completed, maxSteps, stopAfterSeconds, autoStop or precisionTarget "
        "(the steady tokens/s interval reached spec.targetPrecisionPercent).",
    )

    @property
    def measured_tensor_peak_bytes(self) -> int:
        """The measured quantity a memory prediction predicts: the GPU allocator's peak, else the CPU tracker's."""
        return self.gpu_max_memory_allocated_bytes or self.cpu_tensor_peak_bytes

    def with_prediction(self, predicted_peak_bytes: int, device_percent: float | None = None) -> Metrics:
        """These metrics beside the run's predicted peaks and how far they were off: the tensor peak (none without
        a measured one) and, on GPUs, the device-level percentage against NVML's peak."""
        measured = self.measured_tensor_peak_bytes
        error = round(100.0 * (predicted_peak_bytes - measured) / measured, 1) if measured else None
        update: dict[str, object] = {"predicted_peak_bytes": predicted_peak_bytes, "prediction_error_percent": error}
        peak = self.gpu_memory_utilization_peak_percent
        if device_percent is not None and peak:
            update |= {
                "predicted_gpu_memory_peak_percent": device_percent,
                "gpu_memory_prediction_error_points": round(device_percent - peak, 1),
            }
        return self.model_copy(update=update)


class RunError(WireModel):
    """Why a run did not produce metrics."""

    type: BoundedName = Field(description="Exception type, e.g. torch.OutOfMemoryError.")
    message: BoundedMessage = Field(description="First line(s) of the exception message, truncated.")


class TrainerResult(WireModel):
    """One run's result as the trainer writes it (file, termination message, local store)."""

    schema_version: str = Field(RESULT_SCHEMA_VERSION, description="Result schema version.")
    outcome: Outcome
    is_valid: bool | None = Field(
        None, description="True for Succeeded, False for GpuOom, None (not recorded) for Failed (seed semantics)."
    )
    reason: BoundedReason = Field("", description="CamelCase reason, e.g. GpuOutOfMemory or TrainingError.")
    metrics: Metrics | None = None
    environment: RunEnvironment | None = None
    error: RunError | None = None
    trial: Count | None = Field(None, description="Stability trial index.")
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def to_termination_message(self) -> str:
        """Compact JSON that fits the 4096-byte termination message; trims the error text if needed."""
        text = self.to_json()
        if len(text.encode()) <= TERMINATION_MESSAGE_LIMIT:
            return text
        if self.metrics is not None and (self.metrics.loss_curve or len(self.metrics.rank_memory) > 2):
            # The lists go first (the result file keeps them whole); then the error text.
            lean = self.metrics.model_copy(update={"loss_curve": [], "rank_memory": self.metrics.rank_memory[:2]})
            return self.model_copy(update={"metrics": lean}).to_termination_message()
        network = self.environment.network if self.environment is not None else None
        if self.environment is not None and network is not None and network.bandwidth:
            # Then the bandwidth per size (the peak stays).
            lean_env = self.environment.model_copy(update={"network": network.model_copy(update={"bandwidth": []})})
            return self.model_copy(update={"environment": lean_env}).to_termination_message()
        if self.environment is not None and (leaner := _leaner_environment(self.environment)) is not None:
            # Then the Kubeflow report's error text, then the bare command (the result file keeps both).
            return self.model_copy(update={"environment": leaner}).to_termination_message()
        if self.error is not None:
            overflow = len(text.encode()) - TERMINATION_MESSAGE_LIMIT + 16
            short = self.error.message[: max(0, len(self.error.message) - overflow)] + "…"
            text = self.model_copy(update={"error": RunError(type=self.error.type, message=short)}).to_json()
        if len(text.encode()) > TERMINATION_MESSAGE_LIMIT:
            raise ValueError(f"result does not fit a termination message ({len(text.encode())} bytes)")
        return text

    @classmethod
    def from_json(cls, text: str) -> TrainerResult:
        return cls.model_validate(json.loads(text))

    def to_line(self) -> str:
        """The stdout line that carries this result, newline included."""
        return f"{RESULT_PREFIX} {self.to_json()}\n"

    @classmethod
    def from_line(cls, line: str) -> TrainerResult | None:
        """The result a stdout line carries, or None for any other line."""
        if not line.startswith(RESULT_PREFIX + " "):
            return None
        return cls.from_json(line[len(RESULT_PREFIX) + 1 :])


# The bare command's head a termination message keeps when 4 KiB are short (the result file keeps it whole):
# 140 characters name the launcher and the entry point; the data accounting (rowsOffered, rowsTrained)
# took the 60 bytes this was cut by.
TERMINATION_COMMAND_LIMIT = 140


def _leaner_environment(env: RunEnvironment) -> RunEnvironment | None:
    """The environment with the next thing a termination message can do without, or None."""
    report = env.kubeflow_trainer_status
    if report is not None and report.last_error:
        return env.model_copy(update={"kubeflow_trainer_status": report.model_copy(update={"last_error": ""})})
    if len(env.command) > TERMINATION_COMMAND_LIMIT:
        return env.model_copy(update={"command": env.command[: TERMINATION_COMMAND_LIMIT - 1] + "…"})
    return None


def classify_exception(exc: BaseException) -> Outcome:
    """Seed 001's is_valid logic: CUDA OOM and illegal memory access are GPU OOM, the rest Failed.

    Matches by type name and message so it works without importing torch.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "OutOfMemoryError" in names:
        return Outcome.GPU_OOM
    text = str(exc)
    if "CUDA error: out of memory" in text or "CUDA out of memory" in text:
        return Outcome.GPU_OOM
    if "illegal memory access" in text:
        return Outcome.GPU_OOM
    return Outcome.FAILED
