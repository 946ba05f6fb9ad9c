"""Seed 001's stop controls, decided from step-end times so tests can feed synthetic clocks.

The controls: `stop_after_seconds`, `WARMUP_60S_STABLE_120S_OR_10_STEPS` (metrics then cover only
the steps after the warmup) and `target_precision` (spec.targetPrecisionPercent: the steady window's
tokens/s interval is tight enough; the other controls stay the budget).
Each rank decides locally; `agree` (an all-reduce MAX in distributed runs) makes every rank act
on the earliest rank to decide, so all ranks stop on the same step. The precision flag goes the
other way round (a rank sends "not yet"), so the run stops only when every rank's interval is tight.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/measure/stop.py".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ftbench.contracts.plan import StopSettings
from ftbench.contracts.quality import STOPPED_BY_PRECISION
from ftbench.stats.intervals import rate_interval

AUTO_STOP_METHOD = "WARMUP_60S_STABLE_120S_OR_10_STEPS"

# all-reduce MAX over ranks of (warmup_done, stop, precision_not_reached) flags
Agree = Callable[[tuple[bool, ...]], tuple[bool, ...]]


def agree_locally(flags: tuple[bool, ...]) -> tuple[bool, ...]:
    return flags


@dataclass(frozen=True)
class Steady:
    """The steady-state steps measured so far on this rank: each step's padded tokens and seconds."""

    tokens: Sequence[float] = ()
    seconds: Sequence[float] = ()


def precise_enough(settings: StopSettings, steady: Steady) -> bool:
    """Whether the steady window meets the precision target and its minimum window."""
    target = settings.target_precision
    if target is None or len(steady.seconds) < settings.precision_min_steps:
        return False
    if sum(steady.seconds) < settings.precision_min_seconds:
        return False
    interval = rate_interval(steady.tokens, steady.seconds)
    return interval is not None and interval.relative_half_width <= target


@dataclass
class StopDecision:
    stop: bool
    reason: str = ""


class StopController:
    """Feed it every step end (`on_step_end(step_index, seconds_since_start)`)."""

    def __init__(self, settings: StopSettings, agree: Agree = agree_locally) -> None:
        self.settings = settings
        self.agree = agree
        self.auto = settings.auto_stop_method == AUTO_STOP_METHOD
        self.timed = settings.stop_after_seconds > 0
        self.precise = settings.target_precision is not None
        # Index (0-based) of the first step *after* the warmup, once known.
        self.warmup_end_step: int | None = None
        self.warmup_end_seconds: float = 0.0

    @property
    def needs_agreement(self) -> bool:
        """Whether each step needs the cross-rank flag exchange (only for clock- and precision-based stops)."""
        return self.auto or self.timed or self.precise

    def on_step_end(self, step_index: int, elapsed: float, steady: Steady | None = None) -> StopDecision:
        """`steady`: the steady window up to this step's end (read only with a precision target)."""
        if not self.needs_agreement:
            return StopDecision(False)
        warm_local = self.auto and (
            self.warmup_end_step is not None or elapsed >= self.settings.auto_stop_warmup_seconds
        )
        stop_time = self.timed and elapsed >= self.settings.stop_after_seconds
        stop_auto = False
        if self.auto and self.warmup_end_step is not None:
            stable_steps = step_index + 1 - self.warmup_end_step
            stable_seconds = elapsed - self.warmup_end_seconds
            stop_auto = (
                stable_seconds >= self.settings.auto_stop_stable_seconds
                and stable_steps >= self.settings.auto_stop_stable_steps
            )
        unsure = self.precise and not precise_enough(self.settings, steady or Steady())
        warm, stop, any_unsure = self.agree((warm_local, stop_time or stop_auto, unsure))
        if warm and self.warmup_end_step is None:
            self.warmup_end_step = step_index + 1
            self.warmup_end_seconds = elapsed
        if not stop:
            if self.precise and not any_unsure:
                return StopDecision(True, STOPPED_BY_PRECISION)
            return StopDecision(False)
        # Name the rule that fired here; another rank may have fired first (same rule, its clock).
        if stop_time or (self.timed and not stop_auto):
            return StopDecision(True, "stopAfterSeconds")
        return StopDecision(True, "autoStop")
