"""Repeats of one experiment: the outcome they give together and `status.repeats`.

One pure module for the operator (repeat pods finishing one by one) and `ftbench run` (repeats in
fresh processes one after another), so both report the same. A repeat that ran out of GPU memory
makes the experiment's outcome GpuOom (the configuration does not fit, whatever the other repeats
did), one that failed makes it Failed; otherwise the result is the mean over the repeats with
intervals across them (`ftbench.stats.results.mean_of_repeats`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ftbench.api.status import RepeatsStatus
from ftbench.contracts.quality import STOPPED_BY_PRECISION
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.stats.intervals import repeats_interval
from ftbench.stats.results import mean_of_repeats


def combined_result(results: Sequence[TrainerResult]) -> TrainerResult:
    """The experiment's result from its repeats' (in order; at least one)."""
    for outcome in (Outcome.GPU_OOM, Outcome.FAILED):
        if bad := next((r for r in results if r.outcome == outcome), None):
            index = results.index(bad)
            error = (
                bad.error.model_copy(update={"message": f"repeat {index}: {bad.error.message}"}) if bad.error else None
            )
            return bad.model_copy(update={"error": error, "trial": None})
    measured = [r.metrics for r in results if r.metrics is not None]
    first = results[0]
    return first.model_copy(
        update={
            "metrics": mean_of_repeats(measured) if measured else None,
            "trial": None,
            "started_at": first.started_at,
            "finished_at": results[-1].finished_at,
        }
    )


def precise_repeats(results: Sequence[TrainerResult], target: float | None) -> bool:
    """Whether the repeats finished so far need no more: every one succeeded, at least 2, and the 95 %
    interval of their mean is at most +- `target` (spec.targetPrecisionPercent as a fraction). The
    operator and `ftbench run` start no further repeat then."""
    if target is None or len(results) < 2 or any(r.outcome != Outcome.SUCCEEDED for r in results):
        return False
    interval = repeats_interval([r.metrics.steady_state_tokens_per_second for r in results if r.metrics])
    return interval is not None and interval.batches == len(results) and interval.relative_half_width <= target


def repeats_status(planned: int, results: Sequence[TrainerResult], target: float | None = None) -> RepeatsStatus:
    """status.repeats from the repeats finished so far (`target`: the precision that may end them early)."""
    values = [r.metrics.steady_state_tokens_per_second for r in results if r.metrics is not None]
    interval = repeats_interval(values)
    early = len(results) < planned and precise_repeats(results, target)
    mean = statistics.fmean(values) if values else None
    return RepeatsStatus(
        planned=planned,
        finished=len(results),
        steady_state_tokens_per_second=values,
        mean=mean,
        ci95_low=max(0.0, interval.low) if interval else None,  # None with fewer than 2 repeats
        ci95_high=interval.high if interval else None,
        cv=statistics.stdev(values) / mean if len(values) > 1 and mean else None,
        stopped_by=STOPPED_BY_PRECISION if early else None,
    )
