"""95 % confidence intervals that stay valid when consecutive training steps are correlated.

Step times are not independent: a slow data-loader fetch, a GC pause or a thermal dip spans
several steps, so the naive `stdev / sqrt(n)` interval is too narrow. The method of (non-overlapping)
batch means fixes this: the measured steps are cut into `b` consecutive batches of `m` steps each
(`m = floor(sqrt(n))`, `b = floor(n / m)`, the `n - b*m` leftover steps at the start of the window go
into no batch), each batch's mean (or ratio) is one observation, and batches this long are nearly
independent. The interval is `estimate ± t(0.975, b-1) · s_b / sqrt(b)` with `s_b` the sample
standard deviation of the batch values. A rate (tokens/s = Σ tokens / Σ seconds) uses each batch's
own ratio. Fewer than two batches (fewer than 4 steps) give no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Below this many steps batches would be single steps, with nothing against correlation: no interval.
MIN_STEPS_FOR_INTERVAL = 4

# Student's t 0.975 quantile for 1..30 degrees of freedom (two-sided 95 %).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile: the table up to 30 degrees of freedom, then the Cornish-Fisher
    expansion `z + (z^3 + z) / (4 df) + (5z^5 + 16z^3 + 3z) / (96 df^2)` (error < 1e-4 there)."""
    if df < 1:
        raise ValueError("t quantile needs at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Interval:
    """An estimate and its 95 % confidence interval."""

    estimate: float
    low: float
    high: float
    batches: int = 0  # observations the interval rests on (batches, or repeats)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative_half_width(self) -> float:
        """Half-width / estimate (0 for a zero estimate): the ± fraction a reader sees."""
        return self.half_width / abs(self.estimate) if self.estimate else 0.0

    def scaled(self, factor: float) -> Interval:
        """The same relative interval around `estimate · factor` (a rate divided by GPUs, say)."""
        return Interval(self.estimate * factor, self.low * factor, self.high * factor, self.batches)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def batch_layout(n: int) -> tuple[int, int]:
    """(batches, steps per batch) for `n` steps: `m = floor(sqrt(n))`, `b = floor(n / m)`."""
    if n < 1:
        return 0, 0
    size = max(1, math.isqrt(n))
    return n // size, size


def _batches(values: Sequence[T]) -> list[Sequence[T]]:
    count, size = batch_layout(len(values))
    skip = len(values) - count * size  # the leftover steps at the start, nearest the warmup
    return [values[skip + i * size : skip + (i + 1) * size] for i in range(count)]


def _around(estimate: float, observations: Sequence[float]) -> Interval | None:
    b = len(observations)
    if b < 2:
        return None
    half = t_quantile_975(b - 1) * statistics.stdev(observations) / math.sqrt(b)
    return Interval(estimate, estimate - half, estimate + half, b)


def mean_interval(values: Sequence[float]) -> Interval | None:
    """The mean of a correlated series (step times) with its batch-means interval."""
    if len(values) < MIN_STEPS_FOR_INTERVAL:
        return None
    return _around(statistics.fmean(values), [statistics.fmean(b) for b in _batches(values)])


def rate_interval(counts: Sequence[float], seconds: Sequence[float]) -> Interval | None:
    """Σ counts / Σ seconds (tokens/s over steps) with the batch-means interval of the batch ratios."""
    total = sum(seconds)
    if len(counts) != len(seconds) or len(counts) < MIN_STEPS_FOR_INTERVAL or total <= 0:
        return None
    pairs: list[tuple[float, float]] = list(zip(counts, seconds, strict=True))
    ratios = [sum(p[0] for p in b) / s for b in _batches(pairs) if (s := sum(p[1] for p in b)) > 0]
    return _around(sum(counts) / total, ratios)


def repeats_interval(values: Sequence[float]) -> Interval | None:
    """The mean of independent repeats (fresh processes) with its t interval (batches = repeats)."""
    if not values:
        return None
    return _around(statistics.fmean(values), list(values))


def separated(a: Interval | None, b: Interval | None) -> bool:
    """True when both intervals exist and do not overlap: the difference is beyond the noise.

    Non-overlap of two 95 % intervals is a conservative test (it rejects "equal" at about the
    0.6 % level for similar widths), so "within noise" errs on the side of not claiming a change.
    """
    return a is not None and b is not None and (a.high < b.low or b.high < a.low)
