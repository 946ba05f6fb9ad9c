"""How sure a measurement is: its noise flags, its interval's scope, its quality, the precision target's stop.

Fields of a result's `Metrics` (ftbench.contracts.results) and of the repeats' aggregate; the rules that
set them are ftbench.stats (docs/measurements.md, "How sure a number is").
"""

from __future__ import annotations

from enum import StrEnum


class NoiseFlag(StrEnum):
    """Why a measurement should not be trusted as it stands (rules and thresholds: ftbench.stats.noise)."""

    SHORT_WINDOW = "shortWindow"  # too few measured steps or seconds to say anything
    HIGH_STEP_TIME_CV = "highStepTimeCv"  # measured step times scatter
    HOST_CONTENTION = "hostContention"  # CPU steal, or other runnable threads beyond the CPUs
    GPU_THROTTLED = "gpuThrottled"  # NVML reported thermal or hardware clock throttling, or a lowered power cap


# stoppedBy of a run (and status.repeats.stoppedBy of repeats) that its precision target ended.
STOPPED_BY_PRECISION = "precisionTarget"


class IntervalScope(StrEnum):
    """Which kind of sure an interval is: one run's steps only cover the run's own speed (each process
    lands on its own: docs/benchmarks.md, "How sure"), repeats in fresh processes cover the setup's."""

    WITHIN_RUN = "withinRun"  # batch means over one run's measured steps: repeat to confirm
    ACROSS_REPEATS = "acrossRepeats"  # t interval over repeats, each in a fresh process


class MeasurementQuality(StrEnum):
    """What `kubectl get fte` shows in its Noise column."""

    CLEAN = "clean"
    FLAGGED = "flagged"
