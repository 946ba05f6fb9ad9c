"""`FineTuneSweep`: many FineTuneExperiments over a space of configurations, and what they measured.

A sweep is a template (a FineTuneExperiment spec, possibly partial) plus a matrix (spec field ->
values) whose Cartesian product, with `include` points added and `exclude` points dropped as in
the CI matrices users know, is the set of points. Each point runs `repeats` times as child
FineTuneExperiments. The expansion, ordering, OOM pruning and status table are pure functions in
`ftbench.sweep`; the operator and `ftbench sweep` both call them, so a sweep runs the same way on a
cluster and on this machine.

Field descriptions are the user documentation (`kubectl explain fts.spec`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, WithJsonSchema, field_validator

from ftbench.api.api_model import ApiModel
from ftbench.api.bounds import MAX_REPEATS
from ftbench.api.run_settings import RunSettings
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import AcceptedGeneration, Condition, ObservedGeneration
from ftbench.contracts.bounded import BoundedMessage, BoundedReason
from ftbench.contracts.results import Metrics

# Bounds: the status table holds one row per point, and a Kubernetes object must stay well under
# etcd's 1.5 MiB; a row is at most ~1 KiB with its values, so 500 points x 10 repeats fit.
MAX_POINTS = 500
MAX_PARALLELISM = 256
MAX_MATRIX_VALUES = 100
MAX_LIST_ENTRIES = 100

RUN_PREFIX = "run."


def spec_fields() -> frozenset[str]:
    """The keys a matrix, an include/exclude entry or the template may set (wire names)."""
    top = {f.alias or n for n, f in FineTuneExperimentSpec.model_fields.items()}
    nested = {RUN_PREFIX + (f.alias or n) for n, f in RunSettings.model_fields.items()}
    return frozenset((top - {"run"}) | nested)


# The numeric metrics an objective may name: Metrics' float fields that every result has (the
# results' own names); the intervals, unset for short runs, are for comparing, not for ranking.
# datasetTokensPerSecond is null only for rows with no text to count (chat, vision): a point without it has no
# objective value, as a failed one.
RANKABLE_NULLABLE = ("dataset_tokens_per_second", "dataset_tokens_per_second_per_gpu")
OBJECTIVE_METRICS: tuple[str, ...] = tuple(
    field.alias or name
    for name, field in Metrics.model_fields.items()
    if field.annotation is not None
    and "float" in str(field.annotation)
    and "list" not in str(field.annotation)
    and ("None" not in str(field.annotation) or name in RANKABLE_NULLABLE)
    and field.alias
)
ObjectiveMetric = Literal[OBJECTIVE_METRICS]  # type: ignore[valid-type]

# Any JSON value: a matrix value is whatever the spec field takes (a number, a string, a list...).
_ANY_VALUE = {"x-kubernetes-preserve-unknown-fields": True}
_POINT_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
# include and exclude take the same thing, a bounded list of points (spec field -> value): one type for both,
# so their schemas cannot drift apart.
PointList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema({"type": "array", "maxItems": MAX_LIST_ENTRIES, "items": _POINT_OBJECT}),
]


class Direction(StrEnum):
    MAX = "max"
    MIN = "min"


class Objective(ApiModel):
    """What "best" means: one measured property, maximised or minimised."""

    metric: ObjectiveMetric = Field(
        "trainTokensPerSecond", description="A numeric status.results field of the children, e.g. trainTokensPerSecond."
    )
    direction: Direction = Field(Direction.MAX, description="max or min.")


# The objectives a search can predict (ftbench.predict.throughput): tokens/s in all, or per GPU.
SEARCH_TOTAL = ("trainTokensPerSecond", "datasetTokensPerSecond", "steadyStateTokensPerSecond")
SEARCH_PER_GPU = ("trainTokensPerGpuPerSecond", "datasetTokensPerSecondPerGpu")


class Search(ApiModel):
    """Measure only what the prediction says may be best, instead of every point (ftbench.sweep.search)."""

    fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        0.25,
        description="Measure at most this share of the runnable points (rounded down, at least one). The search "
        "runs the point whose predicted objective, corrected by the points measured so far, is highest; it never "
        "runs a point whose optimistic end (prediction x (1 + its band)) cannot beat the best measured, and "
        "stops when no point can or the budget is spent: the rest end Skipped with the reason.",
    )
    trials: Annotated[int, Field(ge=1, le=MAX_POINTS)] | None = Field(
        None, description="At most this many points measured (the smaller of this and fraction's)."
    )
    gpu_hours: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Start no further point once the sweep's runs have spent this many device-hours "
        "(status.deviceHours.spent: GPUs, or CPU ranks, x hours). Runs already started finish.",
    )


class FineTuneSweepSpec(ApiModel):
    """What to measure: every point of the matrix, `repeats` times. Immutable once created."""

    template: Annotated[dict[str, Any], WithJsonSchema({"type": "object"})] = Field(
        default_factory=dict,
        description="A FineTuneExperiment spec (the fields of `kubectl explain fte.spec`); fields the matrix "
        "sets may be left out. Each point is this template with the point's values set.",
    )
    matrix: Annotated[
        dict[str, list[Any]],
        WithJsonSchema(
            {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_MATRIX_VALUES,
                    "items": _ANY_VALUE,
                },
            }
        ),
    ] = Field(
        default_factory=dict,
        description="Spec field (as in fte.spec, e.g. batchSize, or run.<field>) -> the values it takes. "
        "The points are the Cartesian product of the lists.",
    )
    include: PointList = Field(
        default_factory=list,
        description="Extra points: each entry sets spec fields on top of the template (its fields need not be "
        "in the matrix). An entry equal to a point of the product adds nothing.",
    )
    exclude: PointList = Field(
        default_factory=list,
        description="Points to drop from the product: a point is dropped when it has every value of an entry "
        "(an entry may name only some matrix fields). Applied before include.",
    )
    repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = Field(
        1, description="Runs per point (for the spread across repeats); each run is its own FineTuneExperiment."
    )
    parallelism: Annotated[int, Field(ge=1, le=MAX_PARALLELISM)] = Field(
        1, description="At most this many child experiments unfinished at once."
    )
    objective: Objective = Field(default_factory=Objective, description="What the best point is best at.")
    oom_pruning: bool = Field(
        True,
        description="Run points from the smallest memory demand up; when a point runs out of GPU memory, skip "
        "every point that needs at least as much memory per GPU with everything else equal (a per-device batch "
        "and a sequence length at least as large). Such a point waits until those below it end.",
    )
    skip_predicted_oom: bool = Field(
        True,
        description="Do not launch a point whose predicted peak memory per GPU does not fit its gpuModel: each "
        "point's experiment runs with run.oomPrecheck refuse unless the template sets oomPrecheck, so such a point "
        "ends Skipped with the prediction's numbers and no pod starts. false: run them anyway (warn). FineTuneSweeps "
        "on a cluster only: ftbench sweep on this machine launches every point.",
    )
    search: Search | None = Field(
        None,
        description="Search the points instead of measuring each: the objective must be tokens/s, in all "
        "(trainTokensPerSecond, datasetTokensPerSecond, steadyStateTokensPerSecond) or per GPU "
        "(trainTokensPerGpuPerSecond, datasetTokensPerSecondPerGpu), maximised. Points without a prediction "
        "(CPU runs, a model without an architecture) are measured in point order.",
    )
    reuse: bool = Field(
        False,
        description="A point whose effective spec (defaults filled in) and trainer image equal those of a "
        "finished FineTuneExperiment in the namespace takes that experiment's result instead of running again.",
    )

    @field_validator("search")
    @classmethod
    def _searchable(cls, search: Search | None, info: ValidationInfo) -> Search | None:
        objective = info.data.get("objective")
        if search is None or objective is None:
            return search
        if objective.metric not in (*SEARCH_TOTAL, *SEARCH_PER_GPU) or objective.direction != Direction.MAX:
            raise ValueError(
                f"needs an objective ftbench can predict, maximised; spec.objective is {objective.metric} "
                f"{objective.direction}: set objective.metric to one of {', '.join((*SEARCH_TOTAL, *SEARCH_PER_GPU))} "
                "with direction max, or remove spec.search to measure every point"
            )
        return search


class PointPhase(StrEnum):
    """Where a point stands. GpuOom, Invalid and Skipped are measurements too (isValid false)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    GPU_OOM = "GpuOom"
    FAILED = "Failed"
    INVALID = "Invalid"
    SKIPPED = "Skipped"
    REUSED = "Reused"


FINISHED_POINT_PHASES = frozenset(
    {PointPhase.SUCCEEDED, PointPhase.GPU_OOM, PointPhase.FAILED, PointPhase.INVALID, PointPhase.SKIPPED,
     PointPhase.REUSED}
)  # fmt: skip


class SweepPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"


class PointRow(ApiModel):
    """One point of the table: the values it varies, how it ended and the headline numbers."""

    point: Annotated[int, Field(ge=0)] = Field(description="Point number, in matrix order (then include order).")
    values: Annotated[dict[str, Any], WithJsonSchema(_POINT_OBJECT)] = Field(
        default_factory=dict, description="The point's values of the varied fields."
    )
    phase: PointPhase = Field(description="Pending, Running, Succeeded, GpuOom, Failed, Invalid, Skipped or Reused.")
    is_valid: bool | None = Field(None, description="Seed is_valid: false for GpuOom, Invalid and Skipped points.")
    message: BoundedMessage = Field("", description="Why (invalid, skipped, failed).")
    repeats_done: Annotated[int, Field(ge=0)] = Field(0, description="Runs of this point that have ended.")
    train_tokens_per_second: float | None = Field(None, description="Mean over repeats of trainTokensPerSecond.")
    dataset_tokens_per_second: float | None = Field(None, description="Mean over repeats of datasetTokensPerSecond.")
    gpu_memory_peak_percent: float | None = Field(
        None, description="Largest gpuMemoryUtilizationPeakPercent over repeats."
    )
    predicted_memory_percent: float | None = Field(
        None,
        description="The memory prediction's total per GPU as a percentage of the GPU model's memory (the "
        "experiments' status.prediction.fit.predictedPercent; an estimate), beside the measured peak.",
    )
    mfu_percent: float | None = Field(None, description="Mean over repeats of mfuPercent.")
    step_time_cv_across_repeats: float | None = Field(
        None,
        description="Coefficient of variation (stdev / mean) of the repeats' median step times "
        "(stepTimeP50Seconds); unset with fewer than 2 successful repeats.",
    )
    transport: BoundedReason | None = Field(
        None,
        description="The network preflight's transport with its link layer (status.environment.network of the "
        "point's runs, e.g. 'ib (RoCE)'); each one, comma-separated, when the repeats differed; unset without one.",
    )
    peak_bus_bandwidth_gbps: float | None = Field(
        None, description="Mean over repeats of the network preflight's peakBusBandwidthGbps (GB/s)."
    )
    objective: float | None = Field(None, description="Mean over repeats of the objective's metric.")
    objective_ci95_low: float | None = Field(
        None,
        description="Lower end of the objective's 95% interval: across repeats (t interval) with 2 or more, "
        "else the run's throughputCi95Relative for a per-second or MFU objective; unset otherwise.",
    )
    objective_ci95_high: float | None = Field(None, description="Upper end of the objective's 95% interval.")
    experiments: Annotated[list[str], Field(max_length=MAX_REPEATS)] = Field(
        default_factory=list, description="The child FineTuneExperiments (or the reused one)."
    )


class PointCounts(ApiModel):
    """Points per phase."""

    total: Annotated[int, Field(ge=0)] = Field(0, description="Points in the sweep.")
    finished: Annotated[int, Field(ge=0)] = Field(0, description="Points that ended (any final phase).")
    pending: Annotated[int, Field(ge=0)] = Field(0, description="Points not started.")
    running: Annotated[int, Field(ge=0)] = Field(0, description="Points with an unfinished run.")
    succeeded: Annotated[int, Field(ge=0)] = Field(0, description="Points whose runs all succeeded.")
    gpu_oom: Annotated[int, Field(ge=0)] = Field(0, description="Points that ran out of GPU memory.")
    failed: Annotated[int, Field(ge=0)] = Field(0, description="Points with a failed run.")
    invalid: Annotated[int, Field(ge=0)] = Field(0, description="Points refused by validation (no child).")
    skipped: Annotated[int, Field(ge=0)] = Field(0, description="Points not run: predicted OOM.")
    reused: Annotated[int, Field(ge=0)] = Field(0, description="Points that took an earlier experiment's result.")


class BestPoint(ApiModel):
    """The best point by the objective among succeeded and reused points."""

    point: Annotated[int, Field(ge=0)] = Field(description="Point number.")
    values: Annotated[dict[str, Any], WithJsonSchema(_POINT_OBJECT)] = Field(
        default_factory=dict, description="Its values of the varied fields."
    )
    metric: str = Field(description="The objective's metric.")
    value: float = Field(description="Its mean over repeats.")
    ci95_low: float | None = Field(None, description="Lower end of its 95% interval (unset: none known).")
    ci95_high: float | None = Field(None, description="Upper end of its 95% interval.")
    within_noise_of: Annotated[list[int], Field(max_length=MAX_POINTS)] = Field(
        default_factory=list,
        description="Points whose objective interval overlaps the best's: they cannot be told from it, so the "
        "choice among them is not measured (empty: the best is ahead beyond the noise, or no intervals).",
    )
    train_tokens_per_second: float | None = Field(None, description="Its mean trainTokensPerSecond.")
    experiments: list[str] = Field(default_factory=list, description="Its child experiments.")


class DeviceHours(ApiModel):
    """Device time (GPUs, or CPU ranks, x hours) the sweep spent and saved, from its runs' deviceSeconds."""

    spent: Annotated[float, Field(ge=0)] = Field(
        0.0, description="Sum of deviceSeconds of the sweep's runs that left a result, in hours."
    )
    runs_without_result: Annotated[int, Field(ge=0)] = Field(
        0, description="Finished runs that left no result (out of memory, failed): their device time is not in spent."
    )
    saved_by_early_stops_estimate: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Estimate: sum of deviceSecondsSavedEstimate of the runs the precision target stopped before "
        "their budget.",
    )
    saved_by_reuse: Annotated[float, Field(ge=0)] = Field(
        0.0, description="deviceSeconds of the reused results (spec.reuseResults): measured once, not again."
    )
    saved_by_skips_estimate: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Estimate: points skipped for a predicted or a pruned OOM x their devices x the sweep's mean "
        "set-up time per device (what a run costs until it runs out of memory on its first step).",
    )
    with_fixed_stops_estimate: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="Estimate: the same sweep measured with fixed stops and no pruning, skips or reuse: spent plus "
        "every saving.",
    )

    def summary(self) -> str:
        """One line: spent, then each saving (estimates say so), for `ftbench sweep` and reports."""
        line = f"device-hours: {self.spent:.4g} spent"
        saved = [(self.saved_by_early_stops_estimate, "by early stops (estimate)"), (self.saved_by_reuse, "by reuse"),
                 (self.saved_by_skips_estimate, "by OOM skips (estimate)")]  # fmt: skip
        if any(value for value, _ in saved):
            line += "; saved " + ", ".join(f"{value:.4g} {what}" for value, what in saved if value)
            line += f"; {self.with_fixed_stops_estimate:.4g} with fixed stops (estimate)"
        if self.runs_without_result:
            line += f"; {self.runs_without_result} run(s) left no result and are not counted"
        return line


class FineTuneSweepStatus(ApiModel):
    """What the operator observed: the table of points, the best one, conditions. Operator-written."""

    phase: SweepPhase | None = Field(None, description="Pending, Running, Succeeded, Failed or Invalid.")
    observed_generation: ObservedGeneration = None
    conditions: list[Condition] = Field(default_factory=list, description="Valid, Complete.")
    message: BoundedMessage | None = Field(None, description="Summary of the current state.")
    progress: str | None = Field(None, description="finished/total points, e.g. 3/4.")
    counts: PointCounts | None = Field(None, description="Points per phase.")
    best: BestPoint | None = Field(None, description="The best point so far by spec.objective.")
    best_train_tokens_per_second: float | None = Field(
        None, description="trainTokensPerSecond of the best point (for the printer column)."
    )
    points: list[PointRow] = Field(default_factory=list, description="One row per point, in point order.")
    device_hours: DeviceHours | None = Field(
        None, description="Device time spent, and saved by early stops, reuse and OOM skips (estimates say so)."
    )
    predicted_gpu_hours_estimate: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="Estimate, before the sweep starts: GPU-hours of its valid points' training at the predicted "
        "throughput and their stop settings (ftbench.sweep.cost); points without a prediction are not in it "
        "(predictedCost says how many).",
    )
    predicted_cost: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="The predicted cost in words: GPU-hours, training hours, points priced and not."
    )
    start_time: datetime | None = Field(None, description="When the first child was created.")
    completion_time: datetime | None = Field(None, description="When the last point ended.")
    accepted_spec: FineTuneSweepSpec | None = Field(
        None,
        description="The spec the operator accepted and runs, recorded on its first pass. Only the operator writes "
        "status, so an edit stored by a server without the CRD's immutability rule changes nothing that is measured.",
    )
    accepted_generation: AcceptedGeneration = None


SWEEP_API_VERSION: Literal["ftbench.io/v1alpha1"] = "ftbench.io/v1alpha1"


class FineTuneSweep(ApiModel):
    """A benchmark sweep: the spec says which points to measure, the status what they measured."""

    api_version: Literal["ftbench.io/v1alpha1"] = Field(SWEEP_API_VERSION, description="ftbench.io/v1alpha1")
    kind: Literal["FineTuneSweep"] = Field("FineTuneSweep", description="FineTuneSweep")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: FineTuneSweepSpec
    status: FineTuneSweepStatus | None = None
