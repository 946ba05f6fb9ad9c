"""`FineTuneSweep.status` from a plan (or from the structural issues): pure, so the operator only
patches what this returns, and a restart rebuilds the same status from the same observations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from ftbench.api.status import Condition
from ftbench.api.sweep import FineTuneSweepSpec, FineTuneSweepStatus, SweepPhase
from ftbench.api.validation import Issue
from ftbench.contracts.conditions import ConditionType
from ftbench.sweep.cost import SweepCost
from ftbench.sweep.schedule import SweepPlan

STATUS_MESSAGE_LIMIT = 4096


def _condition(
    previous: FineTuneSweepStatus | None,
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> Condition:
    status: Literal["True", "False"] = "True" if ok else "False"
    old = next((c for c in (previous.conditions if previous else []) if c.type == type_), None)
    since = old.last_transition_time if old is not None and old.status == status else now
    return Condition(type=type_, status=status, reason=reason, message=message[:STATUS_MESSAGE_LIMIT],
                     last_transition_time=since, observed_generation=generation)  # fmt: skip


def invalid_status(
    issues: Sequence[Issue], *, generation: int, previous: FineTuneSweepStatus | None, now: datetime
) -> FineTuneSweepStatus:
    """A sweep that cannot be expanded: no point, no child, the reasons."""
    message = "; ".join(str(i) for i in issues)[:STATUS_MESSAGE_LIMIT]
    return FineTuneSweepStatus(
        phase=SweepPhase.INVALID,
        observed_generation=generation,
        conditions=[_condition(previous, ConditionType.VALID, False, "InvalidSweep", message, generation, now)],
        message=message,
    )


def sweep_status(
    plan: SweepPlan,
    *,
    generation: int,
    previous: FineTuneSweepStatus | None,
    now: datetime,
    started: bool,
    accepted: tuple[FineTuneSweepSpec, int] | None = None,
    cost: SweepCost | None = None,
) -> FineTuneSweepStatus:
    """The status after this plan's runs were created (`started`: some run exists). `accepted` is
    the spec the sweep runs and its generation; a newer generation (an edit a server without the
    CRD's immutability rule stored) adds the SpecChangeIgnored condition."""
    done = plan.phase in (SweepPhase.SUCCEEDED, SweepPhase.FAILED)
    start = previous.start_time if previous and previous.start_time else (now if started else None)
    completion = (previous.completion_time if previous and previous.completion_time else now) if done else None
    complete_reason = {SweepPhase.SUCCEEDED: "AllPointsFinished", SweepPhase.FAILED: "PointsFailed"}.get(
        plan.phase, "PointsRemaining"
    )
    conditions = [
        _condition(
            previous, ConditionType.VALID, True, "PointsExpanded", f"{plan.counts.total} points", generation, now
        ),
        _condition(previous, ConditionType.COMPLETE, done, complete_reason, plan.message, generation, now),
    ]
    if accepted is not None and accepted[1] != generation:
        message = (
            f"the spec changed after the sweep started (generation {accepted[1]} -> {generation}); the sweep goes on "
            f"with generation {accepted[1]}'s spec (status.acceptedSpec), the record of what it measures: create a "
            "new sweep (with reuse: true to keep what was measured) to measure the changed one"
        )
        conditions.append(
            _condition(previous, ConditionType.SPEC_CHANGE_IGNORED, True, "SpecImmutable", message, generation, now)
        )
    return FineTuneSweepStatus(
        phase=plan.phase,
        observed_generation=generation,
        conditions=conditions,
        message=plan.message[:STATUS_MESSAGE_LIMIT],
        progress=plan.progress,
        counts=plan.counts,
        best=plan.best,
        best_train_tokens_per_second=plan.best.train_tokens_per_second if plan.best else None,
        points=list(plan.rows),
        device_hours=plan.device_hours,
        predicted_gpu_hours_estimate=cost.gpu_hours_estimate if cost is not None and cost.priced else None,
        predicted_cost=cost.sentence() if cost is not None else None,
        start_time=start,
        completion_time=completion,
        accepted_spec=accepted[0] if accepted else None,
        accepted_generation=accepted[1] if accepted else None,
    )
