"""Aggregate stability-experiment trials into `status.stability` (seed 001's f_* properties).

One function for the operator (trial pods finishing one by one) and `ftbench run` (trials in
sequence), so both report the same fractions. Fractions are over the trials *planned*, and only
final once all have finished; while trials are running they are over the trials finished so far.
"""

from __future__ import annotations

from collections.abc import Iterable

from ftbench.api.status import Stability, TrialOutcome
from ftbench.contracts.outcomes import status_reason
from ftbench.contracts.results import Outcome, TrainerResult

# A trial's message is a summary (a status is read by every watcher on every change).
TRIAL_MESSAGE_LIMIT = 512


def trial(index: int, outcome: Outcome, reason: str, message: str = "") -> TrialOutcome:
    """One finished trial; the operator also builds these from pods that left no result."""
    return TrialOutcome(index=index, outcome=outcome, reason=reason, message=message[:TRIAL_MESSAGE_LIMIT])


def trial_outcome(index: int, result: TrainerResult) -> TrialOutcome:
    """A trial the trainer reported, with the reason the operator gives such a run (outcome table)."""
    message = result.error.message if result.error else ""
    return trial(index, result.outcome, status_reason(result.outcome, result.reason), message)


def aggregate_trials(trials: Iterable[TrialOutcome], planned: int) -> Stability:
    by_index = {t.index: t for t in trials}  # a retried report of the same trial replaces the old one
    finished = sorted(by_index.values(), key=lambda t: t.index)
    denominator = len(finished) or 1

    def fraction(outcome: Outcome) -> float:
        return sum(t.outcome == outcome for t in finished) / denominator

    return Stability(
        trials_planned=planned,
        trials_finished=len(finished),
        f_gpu_oom=fraction(Outcome.GPU_OOM),
        f_other_error=fraction(Outcome.FAILED),
        f_no_error=fraction(Outcome.SUCCEEDED),
        trials=finished,
    )


def stability_is_valid(stability: Stability) -> bool:
    """Seed: whether this collection of tasks is a valid point to investigate.

    The stability experiment *measures* OOMs and errors, so every finished collection is a valid
    point; only an incomplete one is not (yet).
    """
    return stability.trials_finished >= stability.trials_planned
