"""The statistics behind every interval and noise flag, on synthetic series with known answers.

Seeded random series stand in for step times: independent ones, where any honest interval covers
the true mean about 95 % of the time, and AR(1)-correlated ones, where the naive interval fails and
batch means must not. No clock is read here.
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from ftbench.contracts.quality import MeasurementQuality, NoiseFlag
from ftbench.stats.intervals import (
    Interval,
    batch_layout,
    mean_interval,
    rate_interval,
    repeats_interval,
    separated,
    t_quantile_975,
)
from ftbench.stats.noise import MAX_STEP_TIME_CV, HostLoad, WindowFacts, describe, noise_flags
from ftbench_trainer.measure import host_load
from ftbench_trainer.measure.combine import RankReport, RunFacts, combine
from ftbench_trainer.measure.timing import StepRecord, StepTimer
from ftbench_trainer.measure.window import step_window


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.706), (2, 4.303), (10, 2.228), (30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980)]
)
def test_t_quantiles_match_the_tables(df: int, expected: float) -> None:
    assert t_quantile_975(df) == pytest.approx(expected, abs=1.5e-3)


def test_batches_are_sqrt_n_long() -> None:
    assert batch_layout(0) == (0, 0)
    assert batch_layout(3) == (3, 1)
    assert batch_layout(10) == (3, 3)
    assert batch_layout(100) == (10, 10)
    assert batch_layout(1000) == (32, 31)


def test_too_few_steps_give_no_interval() -> None:
    assert mean_interval([]) is None
    assert mean_interval([1.0, 1.0, 1.0]) is None
    assert mean_interval([1.0] * 4) is not None
    assert rate_interval([10] * 4, [1.0] * 4) is not None
    assert rate_interval([10] * 3, [1.0] * 3) is None
    assert rate_interval([10] * 4, [0.0] * 4) is None


def test_a_steady_series_has_a_zero_width_interval() -> None:
    i = mean_interval([0.5] * 50)
    assert i is not None and (i.estimate, i.low, i.high, i.batches) == (0.5, 0.5, 0.5, 7)
    r = rate_interval([100] * 50, [0.5] * 50)
    assert r is not None and (r.estimate, r.half_width, r.relative_half_width) == (200.0, 0.0, 0.0)


def test_the_interval_is_t_times_the_batch_standard_error() -> None:
    # 4 steps: 2 batches of 2, batch means 1.5 and 3.5 -> stdev sqrt(2), half = 12.706 * sqrt(2) / sqrt(2)
    i = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert i is not None
    assert (i.estimate, i.batches) == (2.5, 2)
    assert i.half_width == pytest.approx(12.706)
    r = repeats_interval([1.0, 2.0, 3.0])
    assert r is not None and r.half_width == pytest.approx(4.303 / math.sqrt(3))


def _ar1(rng: random.Random, n: int, phi: float, mean: float = 1.0, sd: float = 0.05) -> list[float]:
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0, sd)
        out.append(mean + x)
    return out


def _naive(values: list[float]) -> Interval:
    m = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(m, m - half, m + half)


def test_independent_steps_are_covered_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    runs = [mean_interval(_ar1(rng, 100, 0.0)) for _ in range(400)]
    coverage = sum(i is not None and i.contains(1.0) for i in runs) / len(runs)
    assert 0.91 <= coverage <= 0.99


def test_correlated_steps_are_covered_where_the_naive_interval_fails() -> None:
    rng = random.Random(11)
    series = [_ar1(rng, 400, 0.7) for _ in range(400)]
    batch = sum(i is not None and i.contains(1.0) for i in map(mean_interval, series)) / len(series)
    naive = sum(_naive(s).contains(1.0) for s in series) / len(series)
    assert batch >= 0.88
    assert naive <= 0.75  # what the batch means are for


def test_a_rate_interval_covers_the_true_rate() -> None:
    rng = random.Random(3)
    hits = 0
    for _ in range(300):
        times = [max(0.01, t) for t in _ar1(rng, 64, 0.5, mean=0.5, sd=0.05)]
        r = rate_interval([1000] * 64, times)
        hits += r is not None and r.contains(1000 / 0.5)
    assert hits / 300 >= 0.88


def test_intervals_separate_only_when_they_do_not_overlap() -> None:
    a, b, c = Interval(10, 9, 11), Interval(12, 11.5, 12.5), Interval(10.8, 10.5, 11.1)
    assert separated(a, b) and separated(b, a)
    assert not separated(a, c)
    assert not separated(a, None) and not separated(None, None)
    assert a.scaled(0.5) == Interval(5, 4.5, 5.5)


def _facts(**kw: object) -> WindowFacts:
    base: dict[str, object] = {
        "measured_steps": 50,
        "measured_seconds": 30.0,
        "has_interval": True,
        "step_time_cv": 0.01,
    }
    return WindowFacts(**(base | kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("facts", "flags"),
    [
        (_facts(), []),
        (_facts(measured_steps=19), [NoiseFlag.SHORT_WINDOW]),
        (_facts(measured_seconds=9.9), [NoiseFlag.SHORT_WINDOW]),
        (_facts(has_interval=False), [NoiseFlag.SHORT_WINDOW]),
        (_facts(step_time_cv=MAX_STEP_TIME_CV + 0.01), [NoiseFlag.HIGH_STEP_TIME_CV]),
        (_facts(host=HostLoad(steal_percent=2.5)), [NoiseFlag.HOST_CONTENTION]),
        (_facts(host=HostLoad(contended_threads=0.5)), [NoiseFlag.HOST_CONTENTION]),
        (_facts(host=HostLoad(contended_threads=0.4)), []),
        (_facts(gpu_throttled_fraction=0.2), [NoiseFlag.GPU_THROTTLED]),
        (_facts(measured_steps=3, step_time_cv=0.5), [NoiseFlag.SHORT_WINDOW, NoiseFlag.HIGH_STEP_TIME_CV]),
    ],
)
def test_noise_rules(facts: WindowFacts, flags: list[NoiseFlag]) -> None:
    assert noise_flags(facts) == flags
    assert all(describe(f) for f in flags)


PROC_STAT = """cpu  100 0 50 800 10 0 0 40 0 0
cpu0 50 0 25 400 5 0 0 20 0 0
procs_running 6
procs_blocked 0
"""


def test_proc_stat_and_task_states_are_read(tmp_path: Path) -> None:
    assert host_load.parse_proc_stat(PROC_STAT) == (40, 1000, 6)
    assert host_load.task_state("123 (python (a) b) R 1 2 3") == "R"
    (tmp_path / "stat").write_text(PROC_STAT)
    for tid, state in ((1, "R"), (2, "S"), (3, "R")):
        task = tmp_path / "42" / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(f"{tid} (python) {state} 1 1")
    assert host_load.running_threads([42, 99], tmp_path) == 2
    reading = host_load.read_host([42], tmp_path)
    assert (reading.steal, reading.total, reading.running, reading.own_running) == (40, 1000, 6, 2)
    assert host_load.read_host([42], tmp_path / "missing") == host_load.HostReading()


def test_contention_counts_only_others_beyond_the_cpus() -> None:
    r = host_load.HostReading
    assert r(running=6, own_running=2, cpus=4).contended_threads == 2
    assert r(running=3, own_running=1, cpus=4).contended_threads == 0  # a CPU to spare
    assert r(running=9, own_running=9, cpus=2).contended_threads == 0  # the run oversubscribes itself
    readings = [r(steal=10, total=1000, running=6, own_running=2, cpus=4), r(steal=30, total=2000, running=4, cpus=4)]
    assert host_load.summarize(readings) == (2.0, 1.0)
    assert host_load.summarize([]) == (0.0, 0.0)


def _timer(times: list[float], tokens: int = 100) -> StepTimer:
    start, records, end = 0.0, [], 0.0
    for i, t in enumerate(times, 1):
        end += t
        records.append(StepRecord(end, i, tokens * i, tokens * i, tokens * i))
    return StepTimer(start=start, steps=records)


def test_the_warmup_steps_of_the_spec_move_the_steady_start() -> None:
    times = [5.0] + [1.0] * 9
    default = step_window(_timer(times), None)
    assert (default.steady_start, default.steady_step_times) == (1, (1.0,) * 9)
    assert step_window(_timer(times), None, 3).steady_start == 3
    assert step_window(_timer(times), None, 0).steady_step_times == tuple(times)
    assert step_window(_timer(times), None, 50).steady_start == 9  # at least one measured step
    assert default.steady_step_tokens == (100,) * 9


def test_a_run_carries_its_interval_and_flags() -> None:
    rng = random.Random(5)
    times = [3.0] + [max(0.1, rng.gauss(0.5, 0.1)) for _ in range(99)]
    window = step_window(_timer(times), None, 4)
    m = combine([RankReport(window=window), RankReport(window=window)], RunFacts(2, "float32", 10.0))
    assert (m.warmup_steps, m.measured_steps) == (4, 96)
    assert m.measured_seconds == pytest.approx(sum(times[4:]))
    assert m.steady_state_tokens_per_second == pytest.approx(2 * 100 * 96 / sum(times[4:]))
    low, high = m.steady_state_tokens_per_second_ci95_low, m.steady_state_tokens_per_second_ci95_high
    assert low is not None and high is not None and low < m.steady_state_tokens_per_second < high
    assert m.throughput_ci95_relative == pytest.approx((high - low) / 2 / m.steady_state_tokens_per_second)
    assert m.step_time_mean_seconds == pytest.approx(statistics.fmean(times[4:]))
    assert m.step_time_cv > MAX_STEP_TIME_CV  # 0.1 / 0.5, the 3 s first step left out
    assert m.noise_flags == [NoiseFlag.HIGH_STEP_TIME_CV]
    assert m.measurement_quality == MeasurementQuality.FLAGGED


def test_a_run_of_three_steps_has_no_interval_and_says_so() -> None:
    m = combine([RankReport(window=step_window(_timer([1.0, 1.0, 1.0]), None))], RunFacts(1, "float32", 10.0))
    assert m.steady_state_tokens_per_second_ci95_low is None and m.throughput_ci95_relative is None
    assert m.noise_flags == [NoiseFlag.SHORT_WINDOW]


class _Nvml:
    """A stand-in for pynvml (a throttling GPU is a fault these machines cannot produce)."""

    def __init__(
        self,
        reasons: int | Exception,
        name: str = "nvmlDeviceGetCurrentClocksEventReasons",
        limits_mw: tuple[int, int] = (700_000, 700_000),  # enforced, default
    ) -> None:
        self.reasons = reasons
        self.limits_mw = limits_mw
        setattr(self, name, self._call)

    def _call(self, handle: object) -> int:
        if isinstance(self.reasons, Exception):
            raise self.reasons
        return self.reasons

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        return self.limits_mw[0]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: object) -> int:
        return self.limits_mw[1]


def test_only_thermal_hardware_and_lowered_power_cap_throttling_counts() -> None:
    from ftbench_trainer.measure.system import throttled

    assert throttled(_Nvml(0x40, "nvmlDeviceGetCurrentClocksThrottleReasons"), None)  # HW thermal, older name
    assert throttled(_Nvml(0x8 | 0x4), None)  # HW slowdown
    assert throttled(_Nvml(0x20), None) and throttled(_Nvml(0x80), None)  # SW thermal, HW power brake
    # The SW power cap at the board's default limit is how a GPU trains (seen on an H200 at 700 W)...
    assert not throttled(_Nvml(0x4), None)
    # ...and noise where the limit was lowered below it.
    assert throttled(_Nvml(0x4, limits_mw=(400_000, 700_000)), None)
    assert not throttled(_Nvml(0x1 | 0x2 | 0x10), None)  # idle, application clocks, sync boost
    assert not throttled(_Nvml(RuntimeError("not supported")), None)
    assert not throttled(object(), None)


def test_an_interval_says_which_kind_of_sure_it_is() -> None:
    """Issue 47.2: one run's interval is within-run (repeat to confirm), repeats' is across them; both
    carry their +- in percent for columns (kubectl get fte showed a raw fraction, 0.02698)."""
    from ftbench.contracts.quality import IntervalScope
    from ftbench.stats.intervals import Interval
    from ftbench.stats.results import mean_of_repeats, steady_interval_fields
    from ftbench.stats.text import steady_short, steady_throughput

    run = RankReport(window=step_window(_timer([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0]), None))
    one = combine([run], RunFacts(1, "float32", 10.0))
    assert one.throughput_ci95_scope == IntervalScope.WITHIN_RUN and one.throughput_ci95_relative is not None
    assert one.throughput_ci95_percent == round(100 * one.throughput_ci95_relative, 2)
    assert "within this run" in steady_throughput(one) and "repeat to confirm" in steady_throughput(one)
    assert steady_short(one).endswith("(run)")
    repeats = [one.model_copy(update={"steady_state_tokens_per_second": v}) for v in (100.0, 104.0, 98.0)]
    across = mean_of_repeats(repeats)
    assert across.throughput_ci95_scope == IntervalScope.ACROSS_REPEATS
    assert "across repeats" in steady_throughput(across) and steady_short(across).endswith("(repeats)")
    assert steady_interval_fields(None, IntervalScope.WITHIN_RUN)["throughput_ci95_scope"] is None
    assert (
        steady_interval_fields(Interval(100.0, 98.0, 102.0), IntervalScope.WITHIN_RUN)["throughput_ci95_percent"] == 2.0
    )
