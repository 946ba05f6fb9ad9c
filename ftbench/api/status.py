"""`FineTuneExperiment.status`, written only by the operator (the trainer writes `progress`).

Every field is declared here so the generated CRD has no preserve-unknown-fields under status:
what is not declared would be pruned by the API server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.bounds import MAX_REPEATS
from ftbench.api.prediction_report import PredictionReport
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.bounded import BoundedMessage, BoundedReason
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.environment import RunEnvironment
from ftbench.contracts.numbers import Count
from ftbench.contracts.outcomes import Phase
from ftbench.contracts.progress import Progress
from ftbench.contracts.results import Metrics, Outcome
from ftbench.stats.device_time import DeviceTime

# The generations both kinds' status record (FineTuneExperiment and FineTuneSweep), stated once.
ObservedGeneration = Annotated[Count | None, Field(description="metadata.generation the operator last acted on.")]
AcceptedGeneration = Annotated[Count | None, Field(description="metadata.generation of the accepted spec.")]


class Condition(ApiModel):
    """metav1.Condition."""

    type: Annotated[str, Field(max_length=316)] = Field(
        description="Condition type: " + ", ".join(t.value for t in ConditionType) + " (ftbench.contracts.conditions)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: BoundedReason = Field(description="CamelCase reason.")
    message: BoundedMessage = Field("", description="Human readable details.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        None, description="metadata.generation the condition was set for."
    )


class ObjectRef(ApiModel):
    api_version: str = Field(description="apiVersion of the child, e.g. batch/v1.")
    kind: str = Field(description="Job, PyTorchJob or TrainJob.")
    name: str = Field(description="Name of the child in the experiment's namespace.")


class RuntimeStatus(ApiModel):
    """Which runtime the attempt runs on, and why: the spec, the profile's pin, or what auto found."""

    name: BoundedReason = Field(description="Job, IndexedJob, PyTorchJob or TrainJob.")
    reason: BoundedMessage = Field(
        "", description="Why, e.g. 'auto: Kubeflow Trainer v2 and ClusterTrainingRuntime ... installed'."
    )


class TrialOutcome(ApiModel):
    index: Annotated[int, Field(ge=0)] = Field(description="Trial number, 0-based.")
    outcome: Outcome = Field(description="Succeeded, GpuOom or Failed.")
    reason: BoundedReason = Field("", description="CamelCase reason.")
    message: BoundedMessage = Field("", description="Error summary for GpuOom/Failed trials.")


class Stability(ApiModel):
    """finetune_full_stability aggregation over its trials (seed 001's measured properties)."""

    trials_planned: Annotated[int, Field(ge=0)] = Field(5, description="Trials the experiment runs.")
    trials_finished: Annotated[int, Field(ge=0)] = Field(0, description="Trials that ended so far.")
    f_gpu_oom: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0, description="Fraction of trials that ran out of GPU memory."
    )
    f_other_error: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0, description="Fraction of trials that failed otherwise."
    )
    f_no_error: Annotated[float, Field(ge=0, le=1)] = Field(0.0, description="Fraction of trials that completed.")
    trials: list[TrialOutcome] = Field(default_factory=list, description="Per-trial outcomes.")


class RepeatsStatus(ApiModel):
    """The same work run several times in fresh processes (spec.repeats, or the stability trials):
    each repeat's steady-state throughput and what they say together (docs/measurements.md)."""

    planned: Annotated[int, Field(ge=1)] = Field(description="Repeats the experiment runs.")
    finished: Annotated[int, Field(ge=0)] = Field(0, description="Repeats that ended so far.")
    steady_state_tokens_per_second: Annotated[list[float], Field(max_length=MAX_REPEATS)] = Field(
        default_factory=list, description="steadyStateTokensPerSecond of each repeat that succeeded, in order."
    )
    mean: float | None = Field(None, description="Their mean (unset before one succeeded).")
    ci95_low: float | None = Field(
        None, description="Lower end of the 95% t interval of the mean across repeats (2 or more succeeded)."
    )
    ci95_high: float | None = Field(None, description="Upper end of that interval.")
    cv: float | None = Field(None, description="Sample stdev / mean across repeats (2 or more succeeded).")
    stopped_by: BoundedReason | None = Field(
        None,
        description="precisionTarget when the repeats stopped before `planned` because the interval across the "
        "finished ones reached spec.targetPrecisionPercent; unset otherwise.",
    )


class DeviceTimeStatus(ApiModel):
    """Device-seconds (devices x seconds) the run spent, split where they went (ftbench.stats.device_time);
    with repeats, over every repeat that finished."""

    device_seconds: Annotated[float, Field(ge=0)] = Field(
        description="From the trainer's start to the end of training (scheduling and image pulls not included)."
    )
    setup: Annotated[float, Field(ge=0)] = Field(description="Before the first step: model and data loading.")
    warmup: Annotated[float, Field(ge=0)] = Field(description="Steps outside the steady window.")
    measured: Annotated[float, Field(ge=0)] = Field(description="The steady window the throughput rests on.")
    saved_estimate: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="Estimate: what the step or time budget would have cost more where the precision target "
        "stopped the run (unset otherwise).",
    )

    @classmethod
    def of(cls, split: DeviceTime) -> DeviceTimeStatus:
        return cls(device_seconds=split.total, setup=split.setup, warmup=split.warmup, measured=split.measured,
                   saved_estimate=split.saved_estimate)  # fmt: skip


class BatchStatus(ApiModel):
    """The batch of the accepted spec in HF/TRL's terms (spec.batchSize is ado's batch_size)."""

    per_device_batch_size: Annotated[int, Field(ge=1)] = Field(
        description="Samples per device per forward/backward pass (HF/TRL per_device_train_batch_size): "
        "batchSize / max(1, numberGpus)."
    )
    devices: Annotated[int, Field(ge=1)] = Field(description="Devices the batch is split over: max(1, numberGpus).")
    gradient_accumulation_steps: Annotated[int, Field(ge=1)] = Field(
        description="Forward/backward passes per optimizer step."
    )
    global_batch_size: Annotated[int, Field(ge=1)] = Field(
        description="Samples per optimizer step: perDeviceBatchSize x devices x gradientAccumulationSteps."
    )


class FineTuneExperimentStatus(ApiModel):
    """What the operator observed and the trainer measured: phase, conditions, results. Operator-written."""

    phase: Phase | None = Field(None, description="Pending, Running, Succeeded, Invalid or Failed.")
    observed_generation: ObservedGeneration = None
    conditions: list[Condition] = Field(default_factory=list, description="Valid, Ready, Succeeded, ...")
    is_valid: bool | None = Field(
        None,
        description="Seed is_valid: false for an invalid spec or a GPU out-of-memory run; unset for Failed runs.",
    )
    invalid_reason: BoundedMessage | None = Field(None, description="Why isValid is false.")
    message: BoundedMessage | None = Field(None, description="Summary of the current state (failure reason, etc.).")
    attempt: Annotated[int, Field(ge=0)] = Field(0, description="Run attempt, incremented by ftbench.io/retry.")
    job: ObjectRef | None = Field(None, description="The child that runs the pods.")
    runtime: RuntimeStatus | None = Field(None, description="The runtime the attempt runs on and why it was chosen.")
    accepted_spec: FineTuneExperimentSpec | None = Field(
        None,
        description="The spec the operator accepted and runs (with defaults filled in), recorded when it first "
        "passed validation; every attempt, retries included, runs it, never a later edit. Only the operator "
        "writes status, so nothing a user writes can change what is measured.",
    )
    accepted_generation: AcceptedGeneration = None
    batch: BatchStatus | None = Field(
        None,
        description="The accepted spec's batch as HF/TRL count it (per device, accumulation, global), recorded "
        "with acceptedSpec: spec.batchSize is ado's batch_size, one forward/backward pass over all devices.",
    )
    start_time: datetime | None = Field(None, description="When the first training pod started.")
    completion_time: datetime | None = Field(None, description="When the run ended.")
    progress: Progress | None = Field(None, description="Live progress.")
    results: Metrics | None = Field(None, description="Measured properties (Succeeded runs only).")
    stability: Stability | None = Field(None, description="Trial aggregation (stability experiment only).")
    repeats: RepeatsStatus | None = Field(
        None, description="Throughput of each repeat with the mean, 95% interval and CV across them (repeats > 1)."
    )
    device_time: DeviceTimeStatus | None = Field(
        None, description="Device-seconds the run spent: set-up, warm-up and measured apart (Succeeded runs)."
    )
    environment: RunEnvironment | None = Field(None, description="What actually ran.")
    prediction: PredictionReport | None = Field(
        None,
        description="Peak memory per GPU predicted before anything was created (spec.run.oomPrecheck), split into "
        "parameters, gradients, optimizer state and activations, and whether it fits the GPU model's memory; the "
        "shape of `ftbench predict -o json`. An estimate: docs/measurements.md says what it models.",
    )
