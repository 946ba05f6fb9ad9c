"""Aggregate stability-experiment trials into `status.stability` (seed 001's f_* properties).

One function for the operator (trial pods finishing one by one) and `ftbench run` (trials in
sequence), so both report the same fractions. Fractions are over the trials *planned*, and only
final once all have finished; while trials are running they are over the trials finished so far.
"""

from __future__ import annotations

from collections.abc import Iterable

from ftbench.api.status import Stability, TrialOutcome
from ftbench.contracts.results import Outcome, TrainerResult


def trial_outcome(index: int, result: TrainerResult) -> TrialOutcome:
    message = result.error.message if result.error else ""
    return TrialOutcome(index=index, outcome=result.outcome, reason=result.reason, message=message[:512])


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
