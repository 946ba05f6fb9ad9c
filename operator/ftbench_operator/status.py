"""Pure builders of `FineTuneExperiment.status`: current status + what happened -> a merge patch.

Every field comes from the API's own models (`ftbench.api.status`), checked by them and written by
their camelCase aliases, so the status the operator writes is the schema of the CRD by
construction; floats are rounded for display in one place (`ftbench.api.display`).
Every writer in the operator goes through `diff` so that a reconcile that learns nothing new
patches nothing (no watch event, no reconcile loop). Conditions follow metav1.Condition: one per
type, `lastTransitionTime` kept unless the status value really changes, `observedGeneration`
set on each. Merge patches replace whole lists, so builders always return the full list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ftbench.api import effective
from ftbench.api.display import rounded
from ftbench.api.fabric import asks_roce, roce_warning
from ftbench.api.network import NetworkExpectation, network_verdict
from ftbench.api.prediction_report import PredictionReport
from ftbench.api.profile import ClusterProfile
from ftbench.api.repeats import repeats_status
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.stability import aggregate_trials
from ftbench.api.status import BatchStatus, Condition, DeviceTimeStatus, FineTuneExperimentStatus, Phase, TrialOutcome
from ftbench.contracts.bounded import bounded
from ftbench.contracts.conditions import ConditionType
from ftbench.contracts.results import Metrics
from ftbench.contracts.trainer_status import TrainerStatusReport
from ftbench.stats import text
from ftbench.stats.device_time import device_time
from ftbench_operator.classify import Observation
from ftbench_operator.reasons import (
    GPU_OOM,
    NO_GPU_MEMORY,
    PENDING,
    PREDICTED_BORDERLINE,
    PREDICTED_OOM,
    PREDICTED_TO_FIT,
    PREDICTOR_UNAVAILABLE,
    QUEUED_REASON,
)

CONDITION_ORDER = (
    ConditionType.VALID,
    ConditionType.QUEUED,
    ConditionType.RUNNING,
    ConditionType.SUCCEEDED,
    ConditionType.MEASUREMENT_CLEAN,
    ConditionType.ROCE_CONFIGURED,
    ConditionType.TRAINER_STATUS_REPORTED,
    ConditionType.NETWORK_AS_EXPECTED,
    ConditionType.MEMORY_FITS,
    ConditionType.SPEC_CHANGE_IGNORED,
)

Status = dict[str, Any]


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with seconds, as the API server stores metav1.Time."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utcnow() -> datetime:
    return datetime.now(UTC)


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The full list with `type_` set; its transition time moves only if `status` changed."""
    by_type = {c.get("type"): dict(c) for c in conditions or [] if c.get("type")}
    old = by_type.get(type_)
    since = timestamp(now) if old is None or old.get("status") != status else old["lastTransitionTime"]
    new = Condition.model_validate(  # validated: the status and the stored transition time are strings here
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": bounded(message),
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }
    ).to_wire()
    by_type[type_] = new
    order = {t: i for i, t in enumerate(CONDITION_ORDER)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def batch_status(spec: FineTuneExperimentSpec) -> BatchStatus:
    """status.batch: the accepted batch as HF/TRL count it (spec.batchSize is ado's batch_size)."""
    return BatchStatus(
        per_device_batch_size=effective.per_device_batch_size(spec),
        devices=effective.batch_devices(spec),
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        global_batch_size=effective.global_batch_size(spec),
    )


def condition(status: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in (status or {}).get("conditions") or [] if c.get("type") == type_), None)


def strip_empty(value: Any) -> Any:
    """Drop empty-string fields, recursively. The 1.20 API server's merge patch turns "" into
    null, which the schema then rejects; an omitted field reads the same to every client."""
    if isinstance(value, Mapping):
        return {k: strip_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [strip_empty(v) for v in value]
    return value


def patch(**fields: Any) -> Status:
    """The status fields named (by their Python names) as a merge patch: checked by
    `FineTuneExperimentStatus`, written by alias, None (explicit) deleting a field."""
    wire = FineTuneExperimentStatus(**fields).to_wire()
    aliases = {name: FineTuneExperimentStatus.model_fields[name].alias or name for name in fields}
    return {alias: wire.get(alias) for alias in aliases.values()}


def diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> Status:
    """The merge patch turning `current` into `desired` (None deletes a field)."""
    current = current or {}
    desired = strip_empty(desired)
    return {k: v for k, v in desired.items() if current.get(k) != v and not (v is None and k not in current)}


class StatusBuilder:
    """Builds desired status fields for one experiment at one moment (generation and clock fixed)."""

    def __init__(self, current: Mapping[str, Any] | None, generation: int | None, now: datetime) -> None:
        self.current = dict(current or {})
        self.generation = generation
        self.now = now
        self.conditions: list[dict[str, Any]] = list(self.current.get("conditions") or [])
        self.accepted: Status = {}

    def cond(self, type_: str, status: str, reason: str, message: str = "") -> None:
        self.conditions = set_condition(
            self.conditions, type_, status, reason, message, generation=self.generation, now=self.now
        )

    def accept(self, spec: FineTuneExperimentSpec, generation: int | None) -> None:
        """The spec passed validation: `accepted` holds the fields that record it (a run failing before
        it starts writes them with its outcome, so a retry runs this spec)."""
        self.accepted = patch(accepted_spec=spec, accepted_generation=generation)

    def invalid_spec(self, reason: str, message: str) -> Status:
        """Nothing was created: the spec breaks a rule (reason InvalidSpec) or cannot run here (NotRunnable)."""
        message = bounded(message)
        self.cond(ConditionType.VALID, "False", reason, message)
        self.cond(ConditionType.SUCCEEDED, "False", reason, message)
        return patch(
            phase=Phase.INVALID,
            is_valid=False,
            invalid_reason=message,
            message=message,
            observed_generation=self.generation,
            conditions=self.conditions,
        )

    def started(
        self,
        attempt: int,
        job: Mapping[str, str],
        spec: FineTuneExperimentSpec | Mapping[str, Any],
        spec_generation: int | None,
        runtime: Mapping[str, str] | None = None,
    ) -> Status:
        """Children created for `attempt` from `spec` (recorded as the accepted spec with its batch;
        `runtime`: which runtime and why); the run waits for its pods."""
        parsed = spec if isinstance(spec, FineTuneExperimentSpec) else FineTuneExperimentSpec.model_validate(spec)
        self.cond(ConditionType.VALID, "True", "SpecValid", "the spec passed every rule")
        self.cond(ConditionType.RUNNING, "False", PENDING, "waiting for pods to start")
        self.cond(ConditionType.SUCCEEDED, "Unknown", PENDING, f"attempt {attempt} created")
        return patch(
            phase=Phase.PENDING,
            attempt=attempt,
            job=job,
            runtime=runtime or None,
            accepted_spec=spec,
            accepted_generation=spec_generation,
            batch=batch_status(parsed),
            message=f"attempt {attempt}: waiting for pods",
            observed_generation=self.generation,
            conditions=self.conditions,
        )

    def predicted(self, report: PredictionReport | None, unavailable: str | None = None) -> Status:
        """Condition MemoryFits and status.prediction; `unavailable`: why there is no prediction."""
        if report is None:
            self.cond(ConditionType.MEMORY_FITS, "Unknown", PREDICTOR_UNAVAILABLE, unavailable or "no prediction")
            return {}
        fit = report.fit
        if fit is None:
            self.cond(ConditionType.MEMORY_FITS, "Unknown", NO_GPU_MEMORY, "no GPU memory to compare with: CPU ranks, or a "
                      "gpuModel the cluster profile's gpuMemory does not list")  # fmt: skip
        elif not fit.fits:
            self.cond(ConditionType.MEMORY_FITS, "False", PREDICTED_OOM, fit.sentence())
        else:
            self.cond(
                ConditionType.MEMORY_FITS,
                "True",
                PREDICTED_BORDERLINE if fit.borderline else PREDICTED_TO_FIT,
                fit.sentence(),
            )
        return patch(prediction=report)

    def roce(self, spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
        """Condition RoceConfigured for a multi-node enableRoce run; the problem, if any (for an Event)."""
        if not asks_roce(spec):
            return None
        problem = roce_warning(spec, profile)
        if problem:
            self.cond(ConditionType.ROCE_CONFIGURED, "False", "NoRoceNetwork", problem)
        else:
            self.cond(
                ConditionType.ROCE_CONFIGURED,
                "True",
                "RoceNetwork",
                f"the pods attach to network {profile.roce.network}",
            )
        return problem

    def retrying(self, attempt: int, accepted_generation: int | None) -> Status:
        """Forget the previous attempt's outcome (results, times, progress) and start `attempt`.

        A retry re-runs the accepted spec (status.acceptedSpec), never a later edit: the status
        and an edit's SpecChangeIgnored condition say which generation attempt `attempt` runs.
        """
        runs = f"attempt {attempt} runs the accepted spec of generation {accepted_generation} (status.acceptedSpec)"
        self.cond(ConditionType.RUNNING, "False", PENDING, f"retry: {runs}")
        self.cond(ConditionType.SUCCEEDED, "Unknown", "Retrying", f"retry requested: {runs}")
        if accepted_generation is not None and self.generation != accepted_generation:
            self.cond(ConditionType.SPEC_CHANGE_IGNORED, "True", "SpecImmutable", _edit_not_run(self.generation, runs))
        cleared = ("job", "runtime", "results", "device_time", "environment", "stability", "repeats", "progress",
                   "start_time", "completion_time")  # fmt: skip
        return patch(
            **dict.fromkeys(cleared),
            phase=Phase.PENDING,
            attempt=attempt,
            is_valid=None,
            invalid_reason=None,
            message=f"retry: {runs}",
            conditions=self.conditions,
        )

    def spec_change_ignored(self, accepted_generation: int | None) -> Status:
        runs = f"the operator keeps running generation {accepted_generation}'s spec (status.acceptedSpec)"
        self.cond(ConditionType.SPEC_CHANGE_IGNORED, "True", "SpecImmutable", _edit_not_run(self.generation, runs))
        return patch(observed_generation=self.generation, conditions=self.conditions)

    def observed(
        self,
        obs: Observation,
        *,
        trials: int,
        repeated: bool = False,
        precision: float | None = None,
        network: NetworkExpectation | None = None,
    ) -> Status:
        """Status for what the children show (`classify`); `network`: what the network preflight should show."""
        fields: dict[str, Any] = {"phase": obs.phase, "message": bounded(obs.message)}
        if obs.start_time and not self.current.get("startTime"):
            fields["start_time"] = obs.start_time
        self.queued(obs)
        if obs.phase == Phase.RUNNING:
            self.cond(ConditionType.RUNNING, "True", obs.reason, obs.message)
        elif obs.phase == Phase.PENDING:
            self.cond(ConditionType.RUNNING, "False", obs.reason, obs.message)
        else:
            self.cond(ConditionType.RUNNING, "False", obs.reason, obs.message)
            self.cond(
                ConditionType.SUCCEEDED, "True" if obs.phase == Phase.SUCCEEDED else "False", obs.reason, obs.message
            )
            if not self.current.get("completionTime"):
                fields["completion_time"] = timestamp(self.now)
        if obs.phase == Phase.SUCCEEDED:
            fields["is_valid"] = True
        if obs.phase == Phase.INVALID:
            fields |= {"is_valid": False, "invalid_reason": bounded(f"{obs.reason}: {obs.message}")}
        if obs.result is not None:
            if obs.phase == Phase.SUCCEEDED and obs.result.metrics is not None:
                fields["results"] = rounded(obs.result.metrics)
                self.measurement(obs.result.metrics)
                budget = float((self.current.get("acceptedSpec") or {}).get("stopAfterSeconds") or -1.0)
                split = device_time(obs.result.metrics, budget, runs=max(1, len(obs.trial_results)))
                fields["device_time"] = DeviceTimeStatus.of(split)
            if (measured := self.prediction_measured(obs)) is not None:
                fields["prediction"] = measured
            if obs.result.environment is not None:
                fields["environment"] = obs.result.environment
                self.trainer_status(obs.result.environment.kubeflow_trainer_status)
                if obs.result.environment.network is not None:
                    verdict = network_verdict(obs.result.environment.network, network or NetworkExpectation())
                    self.cond(ConditionType.NETWORK_AS_EXPECTED, verdict.status, verdict.reason, verdict.message)
        if trials > 1:
            fields["repeats"] = repeats_status(trials, obs.trial_results, precision)
            if not repeated:
                fields["stability"] = stability(obs.trials, trials)
        fields["conditions"] = self.conditions
        return patch(**fields)

    def prediction_measured(self, obs: Observation) -> PredictionReport | None:
        """status.prediction with the run's measured tensor peak beside it, once the run has ended (GPU or CPU)."""
        current = self.current.get("prediction")
        result = obs.result
        oom = obs.phase == Phase.INVALID and obs.reason == GPU_OOM
        if not current or result is None or not (obs.phase == Phase.SUCCEEDED or oom):
            return None
        report = PredictionReport.model_validate(current)
        m = result.metrics
        peak = m.measured_tensor_peak_bytes if m is not None else None
        network = result.environment.network if result.environment is not None else None
        tokens = m.steady_state_tokens_per_second if m else None
        return report.measured(peak, oom=oom, tokens_per_second=tokens, network=network)

    def measurement(self, metrics: Metrics) -> None:
        """MeasurementClean from the noise flags (ftbench.stats.noise has the rules)."""
        if metrics.noise_flags:
            self.cond(ConditionType.MEASUREMENT_CLEAN, "False", "NoiseFlagged", text.noise(metrics))
        else:
            self.cond(
                ConditionType.MEASUREMENT_CLEAN, "True", "Clean", "no noise flag: " + text.steady_throughput(metrics)
            )

    def trainer_status(self, report: TrainerStatusReport | None) -> None:
        """TrainerStatusReported from how rank 0's updates to Kubeflow Trainer went (none: not in a
        TrainJob with the status endpoint, no condition)."""
        if report is None:
            return
        if report.failures:
            self.cond(
                ConditionType.TRAINER_STATUS_REPORTED,
                "False",
                "TrainerStatusUnreported",
                f"{report.failures} of {report.sent + report.failures} trainerStatus updates to {report.url} failed "
                f"(training was not affected); last error: {report.last_error}",
            )
        else:
            self.cond(
                ConditionType.TRAINER_STATUS_REPORTED,
                "True",
                "Reported",
                f"{report.sent} trainerStatus updates sent to {report.url}",
            )

    def queued(self, obs: Observation) -> None:
        """Queued: True while the workload is suspended (Kueue has not admitted it), then False."""
        if obs.reason == QUEUED_REASON:
            self.cond(ConditionType.QUEUED, "True", QUEUED_REASON, obs.message)
        elif (old := condition({"conditions": self.conditions}, ConditionType.QUEUED)) and old.get("status") == "True":
            self.cond(ConditionType.QUEUED, "False", "Admitted", "the workload was admitted and unsuspended")


def _edit_not_run(generation: int | None, runs: str) -> str:
    return (
        f"the spec changed after creation (generation {generation}); it is the record of what was measured, "
        f"so {runs}, retries included; to measure the edited spec, create a new FineTuneExperiment"
    )


def stability(done: tuple[TrialOutcome, ...], planned: int) -> Status:
    """`status.stability`: seed 001's fractions over the trials finished so far, from the API's one
    aggregation (the same as `ftbench run`'s), rounded for display."""
    return rounded(aggregate_trials(done, planned)).to_wire()
