"""Step timing and the statistics derived from it (pure functions over recorded step ends).

A step's time is the wall clock between the end of the previous optimizer step and the end of
this one (the first step starts at Trainer's first `on_step_begin`). So consecutive steps tile
the run without gaps: data loading between steps is part of the step that waits for it, and the
sum of the step times is exactly `train_runtime`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class StepRecord:
    """One optimizer step on this rank: when it ended and what it consumed (cumulative counts)."""

    end: float
    samples: int
    padded_tokens: int
    non_padding_tokens: int
    padded_length_squared: int


@dataclass
class StepTimer:
    """Records step boundaries; `start` is the first step's start (monotonic seconds)."""

    start: float | None = None
    steps: list[StepRecord] = field(default_factory=list)

    def step_times(self) -> list[float]:
        if self.start is None:
            return []
        ends = [self.start] + [s.end for s in self.steps]
        return [b - a for a, b in itertools.pairwise(ends)]

    def elapsed(self, now: float) -> float:
        return 0.0 if self.start is None else now - self.start


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population stdev / mean; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean > 0 else 0.0


def steady_state_start(num_steps: int) -> int:
    """Index of the first steady-state step: the first 10% of steps (at least 1) are warmup."""
    if num_steps < 2:
        return 0
    return max(1, num_steps // 10)
