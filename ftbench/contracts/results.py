"""The trainer's result: one versioned schema read by the operator, the CLI and the results store.

The metric names are seed 001's measured properties in camelCase with the unit at the end
(`gpu_compute_utilization_min` -> `gpuComputeUtilizationMinPercent`). docs/measurements.md gives
each one's exact definition. The same `Metrics` model is the `status.results` schema of the CRD.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from ftbench.contracts.bounded import BoundedMessage, BoundedName, BoundedReason
from ftbench.contracts.trainer_status import TrainerStatusReport
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
# The equivalent bare command kept in results (the termination message holds 4 KiB in all).
COMMAND_LIMIT = 1200


Percent = Annotated[float, Field(ge=0)]
NonNegative = Annotated[float, Field(ge=0)]


# Ranks whose shard sizes a result lists, and logged losses it keeps (the termination message holds 4 KiB in all).
RANK_MEMORY_LIMIT = 16
LOSS_CURVE_LIMIT = 16


class NoiseFlag(StrEnum):
    """Why a measurement should not be trusted as it stands (rules and thresholds: ftbench.stats.noise)."""

    SHORT_WINDOW = "shortWindow"  # too few measured steps or seconds to say anything
    HIGH_STEP_TIME_CV = "highStepTimeCv"  # measured step times scatter
    HOST_CONTENTION = "hostContention"  # CPU steal, or other runnable threads beyond the CPUs
    GPU_THROTTLED = "gpuThrottled"  # NVML reported power/thermal clock throttling


class MeasurementQuality(StrEnum):
    """What `kubectl get fte` shows in its Noise column."""

    CLEAN = "clean"
    FLAGGED = "flagged"


class RankMemory(WireModel):
    """One rank's tensors, counted from the running model and optimizer (local shards only)."""

    rank: Annotated[int, Field(ge=0)] = Field(description="Global rank (0 is the main process).")
    parameter_bytes: Annotated[int, Field(ge=0)] = Field(
        description="Bytes of the parameters this rank holds between steps (its shards under FSDP)."
    )
    gradient_bytes: Annotated[int, Field(ge=0)] = Field(
        description="Bytes of the gradients this rank holds when the optimizer steps (first step)."
    )
    optimizer_state_bytes: Annotated[int, Field(ge=0)] = Field(
        description="Bytes of the optimizer state this rank holds after the first step."
    )


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
    wrapped_modules: Annotated[int, Field(ge=0)] = Field(description="Modules FSDP wraps (layers plus the root).")
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
    sharded_parameters: Annotated[int, Field(ge=0)] = Field(
        0, description="Parameters held as DTensor shards (FSDP2) or inside flat parameters (FSDP1)."
    )


class Metrics(WireModel):
    """Measured properties of one successful run (seed 001 plus ftbench's extras)."""

    # GPU (0.0 when no GPU is used, as the seed says). Each GPU is averaged over the run;
    # min/avg/max are taken across GPUs (seed note 1).
    gpu_compute_utilization_min_percent: Percent = Field(0.0, description="Least busy GPU's mean compute utilization.")
    gpu_compute_utilization_avg_percent: Percent = Field(0.0, description="Mean over GPUs of mean compute utilization.")
    gpu_compute_utilization_max_percent: Percent = Field(0.0, description="Busiest GPU's mean compute utilization.")
    gpu_memory_utilization_min_percent: Percent = Field(0.0, description="Lowest per-GPU mean memory used / total.")
    gpu_memory_utilization_avg_percent: Percent = Field(0.0, description="Mean over GPUs of mean memory used / total.")
    gpu_memory_utilization_max_percent: Percent = Field(0.0, description="Highest per-GPU mean memory used / total.")
    gpu_memory_utilization_peak_percent: Percent = Field(
        0.0, description="Highest memory used / total seen on any GPU at any sample."
    )
    gpu_power_min_percent: Percent = Field(0.0, description="Lowest per-GPU mean power as % of the enforced limit.")
    gpu_power_avg_percent: Percent = Field(0.0, description="Mean over GPUs of mean power as % of the enforced limit.")
    gpu_power_max_percent: Percent = Field(0.0, description="Highest per-GPU mean power as % of the enforced limit.")
    gpu_power_min_watts: NonNegative = Field(0.0, description="Lowest per-GPU mean power draw.")
    gpu_power_avg_watts: NonNegative = Field(0.0, description="Mean over GPUs of mean power draw.")
    gpu_power_max_watts: NonNegative = Field(0.0, description="Highest per-GPU mean power draw.")
    gpu_max_memory_allocated_bytes: Annotated[int, Field(ge=0)] = Field(
        0, description="Largest torch.cuda.max_memory_allocated() over ranks."
    )
    gpu_max_memory_reserved_bytes: Annotated[int, Field(ge=0)] = Field(
        0, description="Largest torch.cuda.max_memory_reserved() over ranks."
    )
    cpu_peak_rss_bytes: Annotated[int, Field(ge=0)] = Field(
        0,
        description="Largest peak resident set size of a training process (getrusage ru_maxrss, from its start: "
        "loading included): the memory figure of CPU runs, where the GPU ones are 0.",
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
    train_steps: Annotated[int, Field(ge=0)] = Field(description="Optimizer steps measured.")
    train_samples: Annotated[int, Field(ge=0)] = Field(description="Samples processed by all ranks in measured steps.")
    train_tokens: Annotated[int, Field(ge=0)] = Field(
        description="Tokens (padding included) processed by all ranks in measured steps, counted per batch."
    )
    train_non_padding_tokens: Annotated[int, Field(ge=0)] = Field(
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
    dataset_tokens_per_second: NonNegative = Field(
        description="Dataset tokens per second: each sample counts min(len(tokens), "
        "tokenizer.model_max_length, max_seq_length) (seed note 3)."
    )
    dataset_tokens_per_second_per_gpu: NonNegative = Field(description="datasetTokensPerSecond / max(1, numberGpus).")
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
    warmup_steps: Annotated[int, Field(ge=0)] = Field(
        0, description="Steps at the start of the window left out of the steady state (spec warmupSteps, else 10%)."
    )
    measured_steps: Annotated[int, Field(ge=0)] = Field(
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
    mfu_percent: NonNegative = Field(
        0.0,
        description="Model FLOPs utilization: achieved FLOP/s / (GPUs x peak dense FLOP/s); "
        "0 without a known GPU peak. Formula in docs/measurements.md.",
    )
    model_parameters: Annotated[int, Field(ge=0)] = Field(0, description="Parameters of the model.")
    trainable_parameters: Annotated[int, Field(ge=0)] = Field(0, description="Parameters being trained.")
    model_parameter_bytes: Annotated[int, Field(ge=0)] = Field(
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
    stopped_by: BoundedReason = Field(
        "completed",
        description="What ended training: completed, maxSteps, stopAfterSeconds or autoStop.",
    )


# Message sizes and devices a network result keeps (the termination message holds 4 KiB in all).
BANDWIDTH_SAMPLE_LIMIT = 16
NETWORK_DEVICE_LIMIT = 16


class Collective(StrEnum):
    """The collectives the network preflight times (nccl-tests' all_reduce_perf and all_gather_perf)."""

    ALL_REDUCE = "allReduce"
    ALL_GATHER = "allGather"


class NetworkTransport(StrEnum):
    """The network the collectives used between nodes, as the backend reported it."""

    IB = "ib"  # NCCL's IB verbs transport: InfiniBand or RoCE (linkLayer says which), RDMA
    SOCKET = "socket"  # NCCL's TCP socket transport (no RDMA)
    TCP = "tcp"  # gloo (CPU ranks): always TCP
    UNKNOWN = "unknown"  # NCCL printed no "Using network" line (its debug log was not readable)


class BandwidthSample(WireModel):
    """One collective at one message size, timed as nccl-tests time it (docs/roce.md)."""

    collective: Collective = Field(description="allReduce or allGather.")
    size_bytes: Annotated[int, Field(ge=1)] = Field(
        description="S of nccl-tests: the per-rank buffer of allReduce, the total (gathered) size of allGather."
    )
    seconds: NonNegative = Field(
        description="Mean time of one timed iteration (after the warm-up ones), the slowest rank's."
    )
    alg_bandwidth_gbps: NonNegative = Field(description="algbw: sizeBytes / seconds, in GB/s (1e9 bytes/s).")
    bus_bandwidth_gbps: NonNegative = Field(
        description="busbw: algbw x 2(n-1)/n for allReduce, x (n-1)/n for allGather (n ranks), in GB/s: "
        "comparable with the links' peak bandwidth whatever n is."
    )


class NetworkInEffect(WireModel):
    """The collective bandwidth self-test run before training, and the transport the backend really used."""

    backend: BoundedReason = Field(description="torch.distributed backend: nccl (GPUs) or gloo (CPU ranks).")
    transport: NetworkTransport = Field(
        description="ib (NCCL over IB verbs: InfiniBand or RoCE), socket (NCCL over TCP sockets), tcp (gloo), "
        "or unknown (NCCL's log said nothing)."
    )
    link_layer: BoundedReason = Field(
        "", description="RoCE or IB for transport ib, read from NCCL's NET/IB device list; empty otherwise."
    )
    rdma: bool = Field(False, description="True when NCCL moved data between nodes with RDMA (transport ib).")
    gpu_direct_rdma: bool = Field(
        False, description="True when NCCL reported a GPUDirect RDMA path (via NET/IB/.../GDRDMA)."
    )
    devices: Annotated[list[BoundedReason], Field(max_length=NETWORK_DEVICE_LIMIT)] = Field(
        default_factory=list,
        description="What the transport used: HCA ports (mlx5_0:1/RoCE) for ib, interfaces (eth0) for sockets.",
    )
    fallback: BoundedName = Field(
        "", description="NCCL's warning when it fell back to sockets (e.g. 'NET/IB : No device found.'); empty if none."
    )
    nccl_version: BoundedName = Field("", description="NCCL's version as it printed it; empty for gloo.")
    ranks: Annotated[int, Field(ge=1)] = Field(description="Ranks that took part (n in the busbw factors).")
    warmup_iterations: Annotated[int, Field(ge=0)] = Field(description="Untimed iterations before each size.")
    iterations: Annotated[int, Field(ge=0)] = Field(
        description="Most timed iterations per size (fewer where the time budget required it)."
    )
    seconds: NonNegative = Field(description="Wall-clock time of the whole self-test.")
    bandwidth: Annotated[list[BandwidthSample], Field(max_length=BANDWIDTH_SAMPLE_LIMIT)] = Field(
        default_factory=list, description="algbw and busbw per collective and message size, small to large."
    )
    peak_bus_bandwidth_gbps: NonNegative = Field(
        0.0, description="The largest busBandwidthGbps of any collective and size, in GB/s."
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
    trial: Annotated[int, Field(ge=0)] | None = Field(None, description="Stability trial index.")
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


TERMINATION_COMMAND_LIMIT = 200


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
