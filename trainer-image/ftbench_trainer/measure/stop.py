"""Seed 001's stop controls, decided from step-end times so tests can feed synthetic clocks.

- `stop_after_seconds` > 0: stop at the end of the first step whose end is at least that many
  seconds after the first step started.
- `WARMUP_60S_STABLE_120S_OR_10_STEPS`: the warmup ends at the end of the first step that ends
  >= `warmup_seconds` after the start; the run then stops at the end of the first step at which
  both >= `stable_seconds` have passed since the warmup ended and >= `stable_steps` steps ran
  after it ("the longer of 120 seconds or the duration of 10 optimization steps"). Metrics then
  cover only the steps after the warmup.

Each rank decides locally; `agree` (an all-reduce MAX in distributed runs) makes every rank act
on the earliest rank to decide, so all ranks stop on the same step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ftbench.contracts.plan import StopSettings

AUTO_STOP_METHOD = "WARMUP_60S_STABLE_120S_OR_10_STEPS"

# all-reduce MAX over ranks of (warmup_done, stop) flags
Agree = Callable[[tuple[bool, bool]], tuple[bool, bool]]


def agree_locally(flags: tuple[bool, bool]) -> tuple[bool, bool]:
    return flags


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
        # Index (0-based) of the first step *after* the warmup, once known.
        self.warmup_end_step: int | None = None
        self.warmup_end_seconds: float = 0.0

    @property
    def needs_agreement(self) -> bool:
        """Whether each step needs the cross-rank flag exchange (only for clock-based stops)."""
        return self.auto or self.timed

    def on_step_end(self, step_index: int, elapsed: float) -> StopDecision:
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
        warm, stop = self.agree((warm_local, stop_time or stop_auto))
        if warm and self.warmup_end_step is None:
            self.warmup_end_step = step_index + 1
            self.warmup_end_seconds = elapsed
        if not stop:
            return StopDecision(False)
        # Name the rule that fired here; another rank may have fired first (same rule, its clock).
        if stop_time or (self.timed and not stop_auto):
            return StopDecision(True, "stopAfterSeconds")
        return StopDecision(True, "autoStop")
