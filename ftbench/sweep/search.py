"""A prediction-guided search: which point of a space to measure next, and when to stop (issue 61).

Every point has a predicted objective (higher is better, e.g. tokens/s per GPU) and a relative band (the
prediction's out-of-sample 90th-percentile error). The search measures the point whose prediction, corrected by
the trials so far, is highest; a point whose optimistic end (corrected prediction x (1 + band)) cannot beat the
best measured is never run; it stops when no point can, or when the budget of trials is spent. The correction of
a point is the median ratio measured/predicted of the trials that share most of its knobs (the calibration
issue's "nearest runs", on this search's own trials), so a knob the model gets wrong is learnt where it matters.
Pure: the operator, `ftbench sweep` and bench/search_replay.py call it with the trials they observed, so an
interrupted search resumes from its trials without repeating one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Candidate:
    """One point of the space: its knobs (field -> value), its prediction and that prediction's band."""

    key: str
    knobs: Mapping[str, Any]
    predicted: float
    band: float  # relative: 0.47 is +-47 %
    fits: bool = True  # predicted to fit in memory (a predicted OOM is never run)


@dataclass(frozen=True)
class Trial:
    """A measured point: its value, or None where it failed (OOM, error): a failure is not retried."""

    key: str
    measured: float | None


@dataclass(frozen=True)
class Step:
    """The search's next move: the point to measure, or None with the reason it stops."""

    candidate: Candidate | None
    reason: str
    skipped: dict[str, str] = field(default_factory=dict)  # unmeasured point -> why it is not worth a trial


def budget_of(points: int, fraction: float) -> int:
    """Trials allowed for a space of `points` at `fraction` of it (at least one)."""
    return max(1, math.floor(points * fraction + 1e-9))


def correction(candidate: Candidate, measured: Sequence[tuple[Candidate, float]]) -> float:
    """The median measured/predicted of the trials sharing most knobs with `candidate` (1.0 before any)."""
    if not measured:
        return 1.0

    def shared(other: Candidate) -> int:
        return sum(1 for k, v in candidate.knobs.items() if other.knobs.get(k) == v)

    predicted = [(c, value) for c, value in measured if c.predicted > 0]  # a point without a prediction teaches nothing
    if not predicted:
        return 1.0
    most = max(shared(c) for c, _ in predicted)
    return statistics.median(value / c.predicted for c, value in predicted if shared(c) == most)


def next_step(
    candidates: Sequence[Candidate], trials: Sequence[Trial], budget: int, excluded: Collection[str] = ()
) -> Step:
    """What to measure next (the highest corrected prediction among the points that can still win). `excluded`:
    points settled otherwise (a sweep's OOM pruning): never run, not counted against the budget."""
    by_key = {c.key: c for c in candidates}
    done = {t.key for t in trials} | set(excluded)
    measured = [(by_key[t.key], t.measured) for t in trials if t.measured is not None and t.key in by_key]
    best = max((value for _, value in measured), default=None)
    skipped: dict[str, str] = {}
    hopeful: list[tuple[float, Candidate]] = []
    for c in candidates:
        if c.key in done:
            continue
        if not c.fits:
            skipped[c.key] = "predicted not to fit in memory"
            continue
        corrected = c.predicted * correction(c, measured)
        if best is not None and math.isfinite(c.band) and corrected * (1 + c.band) <= best:
            skipped[c.key] = f"at best {corrected * (1 + c.band):,.4g}, below the best measured {best:,.4g}"
            continue
        hopeful.append((corrected, c))
    if len(trials) >= budget:
        return Step(None, f"the budget of {budget} trials is spent", skipped)
    if not hopeful:
        return Step(None, "no unmeasured point can beat the best measured", skipped)
    return Step(max(hopeful, key=lambda pair: pair[0])[1], "highest corrected prediction", skipped)


UNPREDICTED_BAND = math.inf  # a point without a prediction can always win: it is measured, in point order


def sweep_candidates(points: Sequence[Any], per_gpu: bool) -> list[Candidate]:
    """The runnable points of a sweep (ftbench.sweep.points.SweepPoint) as the search sees them. A point without a
    prediction ranks after every predicted one, in point order, and is never skipped by the bound."""
    out = []
    for p in points:
        if not p.valid:
            continue
        knobs = dict(p.values)
        if p.predicted_tokens_per_second is None:
            out.append(Candidate(str(p.index), knobs, -float(p.index), UNPREDICTED_BAND))
            continue
        per = max(1, p.spec.number_gpus) if per_gpu else 1
        band = p.predicted_band if p.predicted_band is not None else UNPREDICTED_BAND
        out.append(Candidate(str(p.index), knobs, p.predicted_tokens_per_second / per, band))
    return out


def sweep_budget(points: int, fraction: float, trials: int | None) -> int:
    return min(budget_of(points, fraction), trials) if trials is not None else budget_of(points, fraction)


def best_trial(trials: Sequence[Trial]) -> Trial | None:
    ok = [t for t in trials if t.measured is not None]
    return max(ok, key=lambda t: t.measured or 0.0) if ok else None
