"""When a measurement is noisy: the documented rules behind `status.results.noiseFlags`.

Each rule reads what the trainer measured over the steady window (after warmup) and names what a
user should do about it in docs/measurements.md:

- shortWindow: fewer than `MIN_MEASURED_STEPS` measured steps, fewer than `MIN_MEASURED_SECONDS`
  measured seconds, or no interval at all (fewer than 4 steps). Run longer (maxSteps, stopAfterSeconds).
- highStepTimeCv: stdev / mean of the measured step times above `MAX_STEP_TIME_CV`.
- hostContention: CPU steal above `MAX_STEAL_PERCENT` of the CPU time, or on average at least
  `MAX_CONTENDED_THREADS` runnable threads of other processes beyond the node's CPUs (sampled with the
  other system metrics).
- gpuThrottled: NVML reported a thermal or hardware clock-throttle reason, or the power cap of a
  limit lowered below the board's default, in more than `MAX_THROTTLED_FRACTION` of the GPU samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftbench.contracts.quality import NoiseFlag

MIN_MEASURED_STEPS = 20
MIN_MEASURED_SECONDS = 10.0
MAX_STEP_TIME_CV = 0.10
MAX_STEAL_PERCENT = 2.0
MAX_CONTENDED_THREADS = 0.5
MAX_THROTTLED_FRACTION = 0.10


@dataclass(frozen=True)
class HostLoad:
    """What the sampler saw of other work on the host over the window (worst rank)."""

    steal_percent: float = 0.0
    contended_threads: float = 0.0  # mean runnable threads of others beyond the CPUs


@dataclass(frozen=True)
class WindowFacts:
    """The measured window as the rules need it."""

    measured_steps: int
    measured_seconds: float
    has_interval: bool
    step_time_cv: float
    host: HostLoad = HostLoad()
    gpu_throttled_fraction: float = 0.0


def noise_flags(w: WindowFacts) -> list[NoiseFlag]:
    """Every rule the window breaks, in NoiseFlag order (empty: a clean measurement)."""
    flags: list[NoiseFlag] = []
    if not w.has_interval or w.measured_steps < MIN_MEASURED_STEPS or w.measured_seconds < MIN_MEASURED_SECONDS:
        flags.append(NoiseFlag.SHORT_WINDOW)
    if w.step_time_cv > MAX_STEP_TIME_CV:
        flags.append(NoiseFlag.HIGH_STEP_TIME_CV)
    if w.host.steal_percent > MAX_STEAL_PERCENT or w.host.contended_threads >= MAX_CONTENDED_THREADS:
        flags.append(NoiseFlag.HOST_CONTENTION)
    if w.gpu_throttled_fraction > MAX_THROTTLED_FRACTION:
        flags.append(NoiseFlag.GPU_THROTTLED)
    return flags


def describe(flag: NoiseFlag) -> str:
    """One line a user reads next to the flag: what it means and what to do."""
    return {
        NoiseFlag.SHORT_WINDOW: f"fewer than {MIN_MEASURED_STEPS} measured steps or {MIN_MEASURED_SECONDS:g} s: "
        "raise maxSteps or stopAfterSeconds",
        NoiseFlag.HIGH_STEP_TIME_CV: f"step times vary by more than {MAX_STEP_TIME_CV:.0%} (stdev/mean): "
        "look for data-loading stalls or a shared host",
        NoiseFlag.HOST_CONTENTION: "other processes competed for the CPUs (steal or runnable threads beyond the "
        "CPUs): run on an idle node",
        NoiseFlag.GPU_THROTTLED: "the GPU clocks were throttled (heat, hardware slowdown or a lowered power limit): "
        "check cooling, the power supply and the power limit",
    }[flag]
