"""Device time: what a run cost on its devices (GPUs, or CPU ranks) and where it went (issue 47).

The trainer records the facts (`devices`, `setupSeconds`, `trainStepsPlanned` beside the window's
seconds); the split is derived here, once, for the status, the CLI and the sweep's device-hours. It is
derived rather than carried because the result must fit a 4 KiB termination message.

- total: devices x (set-up + the steps' wall time), rank 0's clock;
- setup: before the first step (model and data loading, engine build);
- warmup: steps outside the steady window (autoStop's warm-up and warmupSteps);
- measured: the steady window the throughput rests on;
- saved (an estimate): for a run its precision target stopped, what its budget would have cost
  more: the planned steps left at the mean steady step time, or the seconds left of
  stopAfterSeconds, whichever is less.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftbench.contracts.quality import STOPPED_BY_PRECISION
from ftbench.contracts.results import Metrics


@dataclass(frozen=True)
class DeviceTime:
    """Device-seconds of one run, or of `runs` alike (repeats: the mean repeat's times that many)."""

    total: float = 0.0
    setup: float = 0.0
    warmup: float = 0.0
    measured: float = 0.0
    saved_estimate: float | None = None

    def __add__(self, other: DeviceTime) -> DeviceTime:
        saved = None
        if self.saved_estimate is not None or other.saved_estimate is not None:
            saved = (self.saved_estimate or 0.0) + (other.saved_estimate or 0.0)
        return DeviceTime(self.total + other.total, self.setup + other.setup, self.warmup + other.warmup,
                          self.measured + other.measured, saved)  # fmt: skip


def device_time(m: Metrics, stop_after_seconds: float = -1.0, runs: int = 1) -> DeviceTime:
    """The split for a run's metrics (`stop_after_seconds`: the spec's clock budget, for the saving)."""
    devices = max(1, m.devices) * max(1, runs)
    trained = m.warmup_excluded_seconds + m.train_runtime_seconds
    saved: float | None = None
    if m.stopped_by == STOPPED_BY_PRECISION:
        step = m.measured_seconds / m.measured_steps if m.measured_steps else 0.0
        left = [max(0, m.train_steps_planned - m.train_steps) * step] if m.train_steps_planned else []
        if stop_after_seconds > 0:
            left.append(max(0.0, stop_after_seconds - trained))
        saved = devices * min(left) if left else None
    return DeviceTime(
        total=devices * (m.setup_seconds + trained),
        setup=devices * m.setup_seconds,
        warmup=devices * max(0.0, trained - m.measured_seconds),
        measured=devices * m.measured_seconds,
        saved_estimate=saved,
    )
