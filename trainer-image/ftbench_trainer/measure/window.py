"""One rank's measured window: which recorded steps count, and what they add up to.

Pure arithmetic over `StepTimer`'s records (no clock, no torch), so the windowing rules are tested
with hand-made step lists. With an autoStopMethod warmup only the steps after it are measured;
the steady-state figures, their intervals and noise flags further skip the spec's `warmupSteps`
(default: the first 10% of the measured steps, `steady_state_start`).
Counts in `StepRecord` are cumulative, so a window's counts are differences of two records.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ftbench_trainer.measure.timing import StepRecord, StepTimer, steady_state_start


@dataclass(frozen=True)
class StepWindow:
    """The measured steps of one rank; all zero when no step ended."""

    start: float = 0.0  # when the first measured step started (monotonic seconds)
    end: float = 0.0  # when the last step ended
    step_times: tuple[float, ...] = ()
    step_tokens: tuple[int, ...] = ()  # this rank's padded tokens of each step in step_times
    steady_start: int = 0  # index in step_times of the first steady-state (measured) step
    samples: int = 0
    padded_tokens: int = 0
    non_padding_tokens: int = 0
    padded_length_squared: int = 0
    steady_tokens: int = 0  # padded tokens after the steady-state start
    steady_seconds: float = 0.0
    warmup_seconds: float = 0.0  # time before the window, excluded by the warmup

    @property
    def runtime(self) -> float:
        return self.end - self.start

    @property
    def steady_step_times(self) -> tuple[float, ...]:
        return self.step_times[self.steady_start :]

    @property
    def steady_step_tokens(self) -> tuple[int, ...]:
        return self.step_tokens[self.steady_start :]


def _consumed(before: StepRecord | None, last: StepRecord) -> tuple[int, int, int, int]:
    """(samples, padded, non-padding, padded length squared) after `before` up to `last`."""
    if before is None:
        return last.samples, last.padded_tokens, last.non_padding_tokens, last.padded_length_squared
    return (
        last.samples - before.samples,
        last.padded_tokens - before.padded_tokens,
        last.non_padding_tokens - before.non_padding_tokens,
        last.padded_length_squared - before.padded_length_squared,
    )


def step_window(timer: StepTimer, warmup_end_step: int | None, warmup_steps: int | None = None) -> StepWindow:
    """The window after the warmup (`warmup_end_step`: index of the first step after it, if known).

    A run that ended inside its warmup (or has none) measures every step. The steady state starts
    `warmup_steps` steps into the window (None: the default rule), leaving at least one step.
    """
    steps, start = timer.steps, timer.start
    if not steps or start is None:
        return StepWindow()
    first, warmup = 0, 0.0
    if warmup_end_step is not None and warmup_end_step < len(steps):
        first, warmup = warmup_end_step, steps[warmup_end_step - 1].end - start
    before = steps[first - 1] if first > 0 else None
    samples, padded, non_padding, length_squared = _consumed(before, steps[-1])
    times = timer.step_times()[first:]
    skip = steady_state_start(len(times)) if warmup_steps is None else min(warmup_steps, len(times) - 1)
    steady = first + skip
    counts = [0] + [s.padded_tokens for s in steps]
    steady_from = steps[steady - 1] if steady > 0 else None
    return StepWindow(
        start=before.end if before else start,
        end=steps[-1].end,
        step_times=tuple(times),
        step_tokens=tuple(b - a for a, b in itertools.pairwise(counts[first:])),
        steady_start=skip,
        samples=samples,
        padded_tokens=padded,
        non_padding_tokens=non_padding,
        padded_length_squared=length_squared,
        steady_tokens=_consumed(steady_from, steps[-1])[1],
        steady_seconds=steps[-1].end - (steady_from.end if steady_from else start),
        warmup_seconds=warmup,
    )
