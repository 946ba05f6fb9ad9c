"""The measurement formulas with hand-computed numbers: one rank's window, then every rank combined.

`window.step_window` and `combine.combine` are pure, so multi-rank runs, zero-step runs and warmup
windows are checked here without torch, transformers or a training run.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from ftbench.cli.cmd_run import _fmt
from ftbench.stats.results import mean_of_repeats
from ftbench_trainer.measure.combine import ModelSize, RankReport, RunFacts, combine
from ftbench_trainer.measure.system import GpuSummary
from ftbench_trainer.measure.timing import StepRecord, StepTimer
from ftbench_trainer.measure.window import StepWindow, step_window


def _timer(steps: int, start: float = 100.0) -> StepTimer:
    """1 s steps of one batch each: 2 samples, 4 padded and 3 real tokens, 8 = 2 rows x 2^2."""
    records = [StepRecord(start + i, 2 * i, 4 * i, 3 * i, 8 * i) for i in range(1, steps + 1)]
    return StepTimer(start=start, steps=records)


def test_a_run_without_steps_measures_nothing() -> None:
    assert step_window(StepTimer(), None) == StepWindow()
    assert step_window(StepTimer(start=5.0), 3) == StepWindow()
    assert step_window(StepTimer(steps=[StepRecord(1.0, 1, 1, 1, 1)]), None) == StepWindow()
    assert StepWindow().runtime == 0.0


def test_without_warmup_every_step_is_measured() -> None:
    w = step_window(_timer(10), None)
    assert (w.start, w.end, w.runtime, w.warmup_seconds) == (100.0, 110.0, 10.0, 0.0)
    assert w.step_times == (1.0,) * 10
    assert (w.samples, w.padded_tokens, w.non_padding_tokens, w.padded_length_squared) == (20, 40, 30, 80)
    # steady state skips the first 10% of the steps: step 1 of 10
    assert (w.steady_tokens, w.steady_seconds) == (36, 9.0)


def test_the_warmup_is_cut_off() -> None:
    # warmup ended with step 3 (index 3 is the first measured one): 4 of 7 steps count
    w = step_window(_timer(7), 3)
    assert (w.start, w.end, w.runtime, w.warmup_seconds) == (103.0, 107.0, 4.0, 3.0)
    assert w.step_times == (1.0,) * 4
    assert (w.samples, w.padded_tokens, w.non_padding_tokens, w.padded_length_squared) == (8, 16, 12, 32)
    # 4 measured steps: the first of them is steady-state warmup too
    assert (w.steady_tokens, w.steady_seconds) == (12, 3.0)


def test_a_run_ending_inside_its_warmup_measures_every_step() -> None:
    assert step_window(_timer(5), 5) == step_window(_timer(5), None)
    assert step_window(_timer(5), 9).warmup_seconds == 0.0


def _two_ranks() -> list[RankReport]:
    r0 = StepWindow(
        start=10.0, end=14.0, step_times=(0.5, 1.5, 1.0, 1.0), samples=8, padded_tokens=160,
        non_padding_tokens=120, padded_length_squared=3200, steady_tokens=120, steady_seconds=3.0,
        warmup_seconds=2.0,
    )  # fmt: skip
    r1 = StepWindow(
        start=10.0, end=15.0, step_times=(1.0, 1.0, 1.0, 2.0), samples=8, padded_tokens=200,
        non_padding_tokens=150, padded_length_squared=5000, steady_tokens=150, steady_seconds=4.0,
        warmup_seconds=2.5,
    )  # fmt: skip
    return [
        RankReport(
            window=r0, cpu_percent=100.0, cpu_memory_percent=10.0, node_memory_percent=40.0, gpus=(GpuSummary(50, 40, 200, 50, 60),),
            gpu_name="NVIDIA H100 80GB HBM3", max_memory_allocated=7, max_memory_reserved=9,
        ),
        RankReport(
            window=r1, cpu_percent=300.0, cpu_memory_percent=20.0, node_memory_percent=60.0, gpus=(GpuSummary(70, 60, 300, 75, 80),),
            gpu_name="NVIDIA H100 80GB HBM3", max_memory_allocated=8, max_memory_reserved=6,
        ),
    ]  # fmt: skip


RUN = RunFacts(
    number_gpus=2,
    torch_dtype="bfloat16",
    dataset_tokens_per_sample=20.0,
    model=ModelSize(parameters=1000, trainable=10, layers=2, hidden=8),
    stopped_by="autoStop",
)


def test_two_ranks_sum_counts_over_the_slowest_runtime() -> None:
    m = combine(_two_ranks(), RUN)
    assert m.train_runtime_seconds == 5.0  # the slower rank
    assert m.train_steps == 4  # rank 0's steps (every rank runs the same)
    assert (m.train_samples, m.train_tokens, m.train_non_padding_tokens) == (16, 360, 270)
    assert m.train_samples_per_second == pytest.approx(3.2)
    assert m.train_steps_per_second == pytest.approx(0.8)
    assert m.train_tokens_per_second == pytest.approx(72.0)
    assert m.train_tokens_per_gpu_per_second == pytest.approx(36.0)
    assert m.dataset_tokens_per_second == pytest.approx(16 * 20.0 / 5.0)
    assert m.dataset_tokens_per_second_per_gpu == pytest.approx(32.0)
    assert m.steady_state_tokens_per_second == pytest.approx((120 + 150) / 4.0)  # longest steady time
    assert m.warmup_excluded_seconds == 2.0  # rank 0's
    assert (m.stopped_by, m.model_parameters, m.trainable_parameters) == ("autoStop", 1000, 10)


def test_dataset_tokens_that_cannot_be_counted_are_unknown_not_zero() -> None:
    """Rows without a single text field (chat, vision): datasetTokensPerSecond is null and prints n/a (issue 62)."""
    m = combine(_two_ranks(), dataclasses.replace(RUN, dataset_tokens_per_sample=None))
    assert m.dataset_tokens_per_second is None and m.dataset_tokens_per_second_per_gpu is None
    assert m.model_dump(by_alias=True)["datasetTokensPerSecond"] is None
    assert mean_of_repeats([m, m]).dataset_tokens_per_second is None
    assert _fmt(m.dataset_tokens_per_second) == "n/a"


def test_step_time_statistics_come_from_rank_0() -> None:
    m = combine(_two_ranks(), RUN)
    # sorted 0.5, 1.0, 1.0, 1.5: p50 at position 1.5, p95 at 2.85 (linear interpolation)
    assert m.step_time_p50_seconds == pytest.approx(1.0)
    assert m.step_time_p95_seconds == pytest.approx(1.0 + 0.5 * 0.85)
    assert m.step_time_cv == pytest.approx(math.sqrt((0.25 + 0.25) / 4) / 1.0)


def test_system_figures_spread_over_gpus_and_average_over_ranks() -> None:
    m = combine(_two_ranks(), RUN)
    assert (m.gpu_compute_utilization_min_percent, m.gpu_compute_utilization_avg_percent,
            m.gpu_compute_utilization_max_percent) == (50, 60, 70)  # fmt: skip
    assert (m.gpu_memory_utilization_min_percent, m.gpu_memory_utilization_avg_percent,
            m.gpu_memory_utilization_max_percent) == (40, 50, 60)  # fmt: skip
    assert (m.gpu_power_min_percent, m.gpu_power_avg_percent, m.gpu_power_max_percent) == (50, 62.5, 75)
    assert (m.gpu_power_min_watts, m.gpu_power_avg_watts, m.gpu_power_max_watts) == (200, 250, 300)
    assert m.gpu_memory_utilization_peak_percent == 80
    assert (m.gpu_max_memory_allocated_bytes, m.gpu_max_memory_reserved_bytes) == (8, 9)
    assert (m.cpu_compute_utilization_percent, m.cpu_memory_utilization_percent) == (200.0, 15.0)
    assert m.node_memory_used_percent == 50.0


def test_mfu_counts_frozen_weights_and_attention() -> None:
    m = combine(_two_ranks(), RUN)
    flops = (4 * 1000 + 2 * 10) * 360 + 12 * 2 * 8 * (3200 + 5000)
    assert flops == 3_021_600
    assert m.mfu_percent == pytest.approx(100.0 * flops / 5.0 / (2 * 989e12))
    # The result carries both sides of the division, so MFU can be checked, or made for another peak.
    assert (m.train_model_flops, m.gpu_peak_flops) == (flops, 989e12)
    unknown = combine([RankReport(window=r.window, gpu_name="Some GPU") for r in _two_ranks()], RUN)
    assert (unknown.mfu_percent, unknown.gpu_peak_flops, unknown.train_model_flops) == (None, None, flops)  # n/a
    fp32 = combine(_two_ranks(), RunFacts(number_gpus=2, torch_dtype="float32", dataset_tokens_per_sample=0.0,
                                          model=RUN.model))  # fmt: skip
    assert fp32.mfu_percent == pytest.approx(100.0 * flops / 5.0 / (2 * 494e12))


def test_zero_steps_report_zeros_not_divisions_by_zero() -> None:
    m = combine([RankReport(uncounted_forwards=1), RankReport()], RunFacts(0, "float32", 10.0))
    assert m.train_steps == 0 and m.train_runtime_seconds == 0.0 and m.stopped_by == "completed"
    rates = (m.train_samples_per_second, m.train_steps_per_second, m.train_tokens_per_second,
             m.train_tokens_per_gpu_per_second, m.dataset_tokens_per_second, m.steady_state_tokens_per_second,
             m.step_time_p50_seconds, m.step_time_cv, m.cpu_compute_utilization_percent)  # fmt: skip
    assert all(v == 0.0 for v in rates)
    assert m.mfu_percent is None and m.gpu_power_avg_watts is None  # no GPU: n/a, never a measured-looking 0


def test_one_cpu_rank_divides_per_gpu_rates_by_one() -> None:
    window = step_window(_timer(4), None)
    m = combine([RankReport(window=window)], RunFacts(number_gpus=0, torch_dtype="float32",
                                                      dataset_tokens_per_sample=2.5))  # fmt: skip
    assert m.train_tokens_per_second == m.train_tokens_per_gpu_per_second == pytest.approx(16 / 4.0)
    assert m.dataset_tokens_per_second == m.dataset_tokens_per_second_per_gpu == pytest.approx(8 * 2.5 / 4.0)
    # Issue 45.7: figures that do not apply to CPU ranks are absent (n/a), never 0.
    assert m.gpu_compute_utilization_max_percent is None and m.mfu_percent is None
    assert m.gpu_max_memory_allocated_bytes is None and m.gpu_memory_utilization_peak_percent is None


def test_the_formulas_import_without_torch_or_transformers() -> None:
    code = (
        "import sys\n"
        "sys.modules.update(torch=None, transformers=None, accelerate=None)\n"
        "import ftbench_trainer.measure.combine, ftbench_trainer.measure.window\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_device_time_splits_into_setup_warmup_and_measured_and_a_precision_stop_saves_the_rest() -> None:
    """Two ranks, 7 one-second steps after 20 s of loading: the autoStop warmup took 3 steps and the
    steady window is 3 of the 4 measured ones. A precision stop at step 7 of 100 planned saves the steps
    left at the mean steady step time (1 s) on both devices; a 50 s clock budget leaves less to save."""
    from ftbench.stats.device_time import device_time

    window = step_window(_timer(7), 3)
    facts = RunFacts(number_gpus=2, torch_dtype="float32", dataset_tokens_per_sample=0.0, planned_steps=100)
    # Each rank's own set-up; rank 0's is the run's, so every node reports the same result.
    m = combine([RankReport(window=window, setup_seconds=20.0), RankReport(window=window, setup_seconds=21.5)], facts)
    assert (m.devices, m.setup_seconds, m.train_steps_planned, m.train_steps) == (2, 20.0, 100, 4)
    split = device_time(m)
    assert (split.total, split.setup, split.warmup, split.measured) == (54.0, 40.0, 8.0, 6.0)
    assert split.saved_estimate is None  # not stopped by the target: nothing saved
    precise = m.model_copy(update={"stopped_by": "precisionTarget"})
    assert device_time(precise).saved_estimate == pytest.approx(2 * 96 * 1.0)  # 100 - 4 steps of the window
    assert device_time(precise, stop_after_seconds=50.0).saved_estimate == pytest.approx(2 * (50 - 7))
    assert device_time(m, runs=3).total == 3 * 54.0  # three repeats of the mean one
    one_cpu = combine([RankReport(window=window, setup_seconds=1.0)], RunFacts(0, "float32", 0.0))
    assert (one_cpu.devices, device_time(one_cpu).total) == (1, 8.0)
