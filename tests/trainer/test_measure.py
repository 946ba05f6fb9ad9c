"""Unit tests of the measurement pieces with synthetic inputs (no training)."""

from __future__ import annotations

import io
import json
import random

import pytest

from ftbench.contracts.plan import StopSettings
from ftbench.contracts.progress import ProgressUpdate, parse_progress_line
from ftbench.stats.flops import mfu_percent, peak_flops, training_flops
from ftbench_trainer.measure.stop import AUTO_STOP_METHOD, Steady, StopController
from ftbench_trainer.measure.system import SystemSampler
from ftbench_trainer.measure.timing import StepTimer, coefficient_of_variation, percentile, steady_state_start
from ftbench_trainer.report import StdoutProgressSink


def _run(controller: StopController, step_times: list[float]) -> tuple[int | None, str]:
    """Feed synthetic step durations; returns (number of steps run when it stopped, reason)."""
    elapsed = 0.0
    for i, dt in enumerate(step_times):
        elapsed += dt
        decision = controller.on_step_end(i, elapsed)
        if decision.stop:
            return i + 1, decision.reason
    return None, ""


def test_no_stop_controls_never_stop_and_need_no_agreement() -> None:
    c = StopController(StopSettings())
    assert not c.needs_agreement
    assert _run(c, [100.0] * 50) == (None, "")


def test_stop_after_seconds_stops_on_the_first_step_past_the_limit() -> None:
    c = StopController(StopSettings(stop_after_seconds=2.5))
    assert _run(c, [1.0] * 10) == (3, "stopAfterSeconds")  # ends at 1, 2, 3 s: stops after the 3rd


def test_auto_stop_waits_for_the_longer_of_seconds_and_steps() -> None:
    settings = StopSettings(
        auto_stop_method=AUTO_STOP_METHOD,
        auto_stop_warmup_seconds=6.0,
        auto_stop_stable_seconds=12.0,
        auto_stop_stable_steps=10,
    )
    # Fast steps (1 s): warmup ends after step 6 (t=6); 12 s of stable time (12 steps) > 10 steps.
    c = StopController(settings)
    assert _run(c, [1.0] * 100) == (18, "autoStop")
    assert c.warmup_end_step == 6 and c.warmup_end_seconds == 6.0
    # Slow steps (4 s): warmup ends after step 2 (t=8); 10 steps (40 s) outlast 12 s.
    c = StopController(settings)
    assert _run(c, [4.0] * 100) == (12, "autoStop")
    assert c.warmup_end_step == 2


def test_ranks_agree_on_the_earliest_decision() -> None:
    """With agreement (all-reduce MAX), a rank whose own clock is behind stops with the others."""
    settings = StopSettings(stop_after_seconds=5.0)
    other_rank_says_stop_at = 2
    calls: list[tuple[bool, ...]] = []

    def agree(flags: tuple[bool, ...]) -> tuple[bool, ...]:
        calls.append(flags)
        return flags[0], flags[1] or len(calls) - 1 >= other_rank_says_stop_at, flags[2]

    c = StopController(settings, agree=agree)
    assert _run(c, [1.0] * 10)[0] == 3  # this rank alone would have run 5 steps


def _run_precise(controller: StopController, tokens: list[float], seconds: list[float]) -> tuple[int | None, str]:
    """Feed steps whose whole window is steady (warmupSteps 0); (steps run when it stopped, reason)."""
    elapsed = 0.0
    for i, dt in enumerate(seconds):
        elapsed += dt
        decision = controller.on_step_end(i, elapsed, Steady(tokens[: i + 1], seconds[: i + 1]))
        if decision.stop:
            return i + 1, decision.reason
    return None, ""


PRECISE = StopSettings(target_precision=0.02, precision_min_steps=20, precision_min_seconds=30.0, warmup_steps=0)


def test_a_precision_target_stops_once_the_interval_is_tight_and_the_minimum_window_has_passed() -> None:
    """Steady steps (tokens/s within +-1 % of each other) meet +-2 % at once, but the run goes on to the
    minimum window: 20 steps and 30 s, whichever comes later."""
    seconds = [1.0 + 0.01 * ((i * 7) % 3 - 1) for i in range(200)]
    tokens = [1000.0] * 200
    c = StopController(PRECISE)
    assert c.needs_agreement
    assert _run_precise(c, tokens, seconds) == (30, "precisionTarget")  # 30 s after 30 steps of ~1 s
    fast = [0.5] * 200
    assert _run_precise(StopController(PRECISE), tokens, fast) == (60, "precisionTarget")
    slow = [3.0] * 200
    assert _run_precise(StopController(PRECISE), tokens, slow) == (20, "precisionTarget")


def test_a_noisy_run_goes_on_to_its_budget_and_the_budget_still_stops_it() -> None:
    """Steps whose times spread +-50 % (log-normal) leave a +-8 % interval at 400 steps: no precision stop;
    the clock budget (stopAfterSeconds) ends the run and says so."""
    draw = random.Random(7)
    seconds = [draw.lognormvariate(0.0, 0.5) for _ in range(400)]
    tokens = [1000.0] * 400
    assert _run_precise(StopController(PRECISE), tokens, seconds) == (None, "")
    budget = PRECISE.model_copy(update={"stop_after_seconds": 100.0})
    steps, reason = _run_precise(StopController(budget), tokens, seconds)
    assert reason == "stopAfterSeconds" and steps is not None and steps < 100


def test_every_rank_must_reach_the_precision_target() -> None:
    """The flag a rank sends is 'not yet': one rank whose interval is still wide keeps all ranks going."""
    other_rank_ready_at = 50

    def agree(flags: tuple[bool, ...]) -> tuple[bool, ...]:
        agree.calls += 1  # type: ignore[attr-defined]
        return flags[0], flags[1], flags[2] or agree.calls <= other_rank_ready_at  # type: ignore[attr-defined]

    agree.calls = 0  # type: ignore[attr-defined]
    c = StopController(PRECISE, agree=agree)
    assert _run_precise(c, [1000.0] * 200, [1.0] * 200) == (51, "precisionTarget")


def test_step_timer_tiles_the_run() -> None:
    from ftbench_trainer.measure.timing import StepRecord

    t = StepTimer(start=10.0)
    for end in (11.0, 13.0, 14.0):
        t.steps.append(StepRecord(end, 0, 0, 0, 0))
    assert t.step_times() == [1.0, 2.0, 1.0]
    assert sum(t.step_times()) == t.steps[-1].end - 10.0


def test_statistics() -> None:
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert coefficient_of_variation([2, 2, 2]) == 0
    assert coefficient_of_variation([1, 3]) == pytest.approx(0.5)
    assert steady_state_start(1) == 0 and steady_state_start(5) == 1 and steady_state_start(100) == 10


def test_mfu_formula() -> None:
    # full fine-tuning: 6N per token plus the attention term
    assert training_flops(parameters=10, trainable=10, tokens=3, layers=2, hidden=4, length_squared=5) == (
        6 * 10 * 3 + 12 * 2 * 4 * 5
    )
    # frozen base: 4N (+2 per trainable parameter)
    assert training_flops(parameters=10, trainable=0, tokens=3, layers=0, hidden=0, length_squared=0) == 4 * 10 * 3
    assert peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == 989e12
    assert peak_flops("NVIDIA H100 PCIe", "bfloat16") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "float32") == 156e12
    assert peak_flops("", "bfloat16") == 0.0
    assert mfu_percent(989e12, 1.0, 2, 989e12) == pytest.approx(50.0)
    assert mfu_percent(1.0, 1.0, 0, 0.0) is None and mfu_percent(1.0, 1.0, 1, 0.0) is None  # n/a, never 0


def test_system_sampler_on_cpu_reports_zero_gpu_and_real_cpu() -> None:
    s = SystemSampler(local_rank=0, use_gpu=False, interval=0.01)
    s.start()
    sum(i * i for i in range(200_000))
    s.stop()
    assert s.gpu_summary(0, float("inf")) is None and s.gpu_name == ""
    summary = s.cpu_summary(0, float("inf"))
    assert summary.cpu_percent >= 0 and 0 < summary.memory_percent < 100
    # The node's memory in use counts this process and every other one.
    assert summary.memory_percent <= summary.node_memory_percent < 100


def test_cpu_summary_averages_the_window() -> None:
    from ftbench_trainer.measure.system import CpuSample, CpuSummary

    s = SystemSampler(local_rank=0, use_gpu=False, interval=1.0)
    s.cpu_samples = [CpuSample(1, 100, 2, 40), CpuSample(2, 50, 4, 60), CpuSample(9, 0, 50, 90)]
    assert s.cpu_summary(1, 2) == CpuSummary(cpu_percent=75, memory_percent=3, node_memory_percent=50)


def test_nvml_absent_is_not_an_error() -> None:
    s = SystemSampler(local_rank=0, use_gpu=True, interval=0.01)  # no driver on CPU machines
    s.sample_once()
    s.stop()
    if not s.gpu_name:
        assert s.gpu_samples == []


def test_progress_line_format() -> None:
    out = io.StringIO()
    StdoutProgressSink(out).update(ProgressUpdate(3, 10, 1.5, 1234.5, 3.5))
    line = out.getvalue()
    assert line.startswith("FTBENCH_PROGRESS {") and line.endswith("}\n") and line.count("\n") == 1
    assert parse_progress_line(line.strip()) == {
        "step": 3,
        "totalSteps": 10,
        "elapsedSeconds": 1.5,
        "tokensPerSecond": 1234.5,
        "etaSeconds": 3.5,
    }
    assert parse_progress_line("{'loss': 1.0}") is None
    assert json.loads(line.split(" ", 1)[1])["step"] == 3


def test_token_counter_commits_only_batches_the_model_consumed() -> None:
    """accelerate prefetches one batch ahead: a collated but never-trained batch must not count."""
    torch = pytest.importorskip("torch")
    from ftbench_trainer.measure.tokens import TokenCounter

    def collate(rows: list[list[int]]) -> dict[str, object]:
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": mask}

    counter = TokenCounter()
    wrapped = counter.wrap_collator(collate)
    assert counter.wrap_collator(wrapped) is wrapped  # idempotent
    wrapped([[1, 2, 3], [1]])  # batch 1: 6 padded, 4 real
    counter.on_forward()
    wrapped([[1, 2], [1, 2]])  # batch 2: 4 padded, 4 real
    wrapped([[1] * 5])  # batch 3: prefetched, never trained
    counter.on_forward()
    c = counter.committed
    assert (c.samples, c.padded_tokens, c.non_padding_tokens) == (4, 10, 8)
    assert c.padded_length_squared == 2 * 9 + 2 * 4
    assert counter.uncounted_forwards == 0


def test_gpu_metrics_are_min_avg_max_over_per_gpu_means() -> None:
    from ftbench_trainer.measure.combine import gpu_spread as _gpu_spread
    from ftbench_trainer.measure.system import GpuSample, GpuSummary

    # Per-GPU means from samples (seed note 1), then the spread across GPUs.
    s = SystemSampler(local_rank=0, use_gpu=False, interval=1.0)
    s.gpu_samples = [GpuSample(t, c, m, w, p) for t, c, m, w, p in [(1, 10, 20, 100, 20), (2, 30, 60, 300, 60)]]
    one = s.gpu_summary(0, 2)
    assert one == GpuSummary(20, 40, 200, 40, 60)
    spread = _gpu_spread([one, GpuSummary(40, 60, 400, 80, 70)])
    assert spread["gpu_compute_utilization_min_percent"] == 20
    assert spread["gpu_compute_utilization_avg_percent"] == 30
    assert spread["gpu_compute_utilization_max_percent"] == 40
    assert spread["gpu_power_avg_watts"] == 300 and spread["gpu_power_max_percent"] == 80
    assert all(v == 0.0 for v in _gpu_spread([]).values())


def test_nvml_device_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from ftbench_trainer.measure.system import nvml_device_index

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_device_index(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert nvml_device_index(1) == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,GPU-def")
    assert nvml_device_index(0) == "GPU-abc"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml_device_index(0) is None
