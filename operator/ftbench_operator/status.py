"""Pure builders of `FineTuneExperiment.status`: current status + what happened -> a merge patch.

Every writer in the operator goes through `diff` so that a reconcile that learns nothing new
patches nothing (no watch event, no reconcile loop). Conditions follow metav1.Condition: one per
type, `lastTransitionTime` kept unless the status value really changes, `observedGeneration`
set on each. Merge patches replace whole lists, so builders always return the full list.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ftbench.api.status import Phase
from ftbench.contracts.results import Outcome
from ftbench_operator.classify import PENDING, QUEUED_REASON, Observation, TrialResult

VALID = "Valid"
QUEUED = "Queued"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
SPEC_CHANGE_IGNORED = "SpecChangeIgnored"
CONDITION_ORDER = (VALID, QUEUED, RUNNING, SUCCEEDED, SPEC_CHANGE_IGNORED)

# Every message the status holds is cut to this: a status is read by every watcher on every
# change, and one spec with a huge list of problems once produced a 187 KB status.
MESSAGE_MAX = 4096
TERMINAL = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.INVALID.value})
Status = dict[str, Any]


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with seconds, as the API server stores metav1.Time."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utcnow() -> datetime:
    return datetime.now(UTC)


def bounded(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    tail = f" ... ({len(text) - limit} more characters; see the experiment's Events or `ftbench validate`)"
    return text[: limit - len(tail)] + tail


def set_condition(
    conditions: list[Mapping[str, Any]] | None,
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
    changed = old is None or old.get("status") != status
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": bounded(message),
        "lastTransitionTime": timestamp(now) if changed else old["lastTransitionTime"],
    }
    if generation is not None:
        new["observedGeneration"] = generation
    by_type[type_] = new
    order = {t: i for i, t in enumerate(CONDITION_ORDER)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))


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


def diff(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> Status:
    """The merge patch turning `current` into `desired` (None deletes a field)."""
    current = current or {}
    desired = strip_empty(desired)
    return {k: v for k, v in desired.items() if current.get(k) != v and not (v is None and k not in current)}


class Builder:
    """Builds desired status fields for one experiment at one moment (generation and clock fixed)."""

    def __init__(self, current: Mapping[str, Any] | None, generation: int | None, now: datetime) -> None:
        self.current = dict(current or {})
        self.generation = generation
        self.now = now
        self.conditions: list[dict[str, Any]] = list(self.current.get("conditions") or [])

    def cond(self, type_: str, status: str, reason: str, message: str = "") -> None:
        self.conditions = set_condition(
            self.conditions, type_, status, reason, message, generation=self.generation, now=self.now
        )

    def invalid_spec(self, reason: str, message: str) -> Status:
        """Nothing was created: the spec breaks a rule (reason InvalidSpec) or cannot run here (NotRunnable)."""
        message = bounded(message)
        self.cond(VALID, "False", reason, message)
        self.cond(SUCCEEDED, "False", reason, message)
        return {
            "phase": Phase.INVALID.value,
            "isValid": False,
            "invalidReason": message,
            "message": message,
            "observedGeneration": self.generation,
            "conditions": self.conditions,
        }

    def started(
        self,
        attempt: int,
        job: Mapping[str, str],
        spec: Mapping[str, Any],
        spec_generation: int | None,
        runtime: Mapping[str, str] | None = None,
    ) -> Status:
        """Children created for `attempt` from `spec` (recorded as the accepted spec; `runtime`: which
        runtime and why); the run waits for its pods."""
        self.cond(VALID, "True", "SpecValid", "the spec passed every rule")
        self.cond(RUNNING, "False", PENDING, "waiting for pods to start")
        self.cond(SUCCEEDED, "Unknown", PENDING, f"attempt {attempt} created")
        return {
            "phase": Phase.PENDING.value,
            "attempt": attempt,
            "job": dict(job),
            "runtime": dict(runtime) if runtime else None,
            "acceptedSpec": dict(spec),
            "acceptedGeneration": spec_generation,
            "message": f"attempt {attempt}: waiting for pods",
            "observedGeneration": self.generation,
            "conditions": self.conditions,
        }

    def retrying(self, attempt: int) -> Status:
        """Forget the previous attempt's outcome (results, times, progress) and start `attempt`."""
        self.cond(RUNNING, "False", PENDING, f"retry: attempt {attempt} is starting")
        self.cond(SUCCEEDED, "Unknown", "Retrying", f"retry requested: attempt {attempt}")
        cleared = ("job", "runtime", "results", "environment", "stability", "progress", "startTime", "completionTime")
        return {
            **dict.fromkeys(cleared),
            "phase": Phase.PENDING.value,
            "attempt": attempt,
            "isValid": None,
            "invalidReason": None,
            "message": f"retry: attempt {attempt} is starting",
            "conditions": self.conditions,
        }

    def spec_change_ignored(self, accepted_generation: int | None) -> Status:
        msg = (
            f"the spec changed after creation (generation {self.generation}); it is a record of what was "
            f"measured, so the operator keeps running generation {accepted_generation}'s spec"
        )
        self.cond(SPEC_CHANGE_IGNORED, "True", "SpecImmutable", msg)
        return {"observedGeneration": self.generation, "conditions": self.conditions}

    def observed(self, obs: Observation, *, trials: int) -> Status:
        """Status for what the children show (`classify`)."""
        out: Status = {"phase": obs.phase.value, "message": bounded(obs.message)}
        if obs.start_time and not self.current.get("startTime"):
            out["startTime"] = obs.start_time
        self.queued(obs)
        if obs.phase == Phase.RUNNING:
            self.cond(RUNNING, "True", obs.reason, obs.message)
        elif obs.phase == Phase.PENDING:
            self.cond(RUNNING, "False", obs.reason, obs.message)
        else:
            self.cond(RUNNING, "False", obs.reason, obs.message)
            self.cond(SUCCEEDED, "True" if obs.phase == Phase.SUCCEEDED else "False", obs.reason, obs.message)
            if not self.current.get("completionTime"):
                out["completionTime"] = timestamp(self.now)
        if obs.phase == Phase.SUCCEEDED:
            out["isValid"] = True
        if obs.phase == Phase.INVALID:
            out |= {"isValid": False, "invalidReason": bounded(f"{obs.reason}: {obs.message}")}
        if obs.result is not None:
            if obs.phase == Phase.SUCCEEDED and obs.result.metrics is not None:
                out["results"] = obs.result.metrics.model_dump(mode="json", by_alias=True, exclude_none=True)
            if obs.result.environment is not None:
                out["environment"] = obs.result.environment.model_dump(mode="json", by_alias=True, exclude_none=True)
        if trials > 1:
            out["stability"] = stability(obs.trials, trials)
        out["conditions"] = self.conditions
        return out

    def queued(self, obs: Observation) -> None:
        """Queued: True while the workload is suspended (Kueue has not admitted it), then False."""
        if obs.reason == QUEUED_REASON:
            self.cond(QUEUED, "True", QUEUED_REASON, obs.message)
        elif (old := condition({"conditions": self.conditions}, QUEUED)) and old.get("status") == "True":
            self.cond(QUEUED, "False", "Admitted", "the workload was admitted and unsuspended")


def stability(done: tuple[TrialResult, ...], planned: int) -> Status:
    """Seed 001's stability fractions over the trials finished so far."""
    n = len(done)

    def frac(outcome: Outcome) -> float:
        return round(sum(t.outcome == outcome for t in done) / n, 6) if n else 0.0

    return {
        "trialsPlanned": planned,
        "trialsFinished": n,
        "fGpuOom": frac(Outcome.GPU_OOM),
        "fOtherError": frac(Outcome.FAILED),
        "fNoError": frac(Outcome.SUCCEEDED),
        "trials": [
            {
                "index": t.index,
                "outcome": t.outcome.value,
                "reason": t.reason[:256],
                "message": bounded(t.message, 1024),
            }
            for t in done
        ],
    }
