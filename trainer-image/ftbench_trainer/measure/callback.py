"""`MeasureCallback`: the one transformers `TrainerCallback` both engines run with.

Per step it only reads the clock, copies a few Python ints and (for clock-based stops) exchanges
two flags; all heavy lifting — collectives, statistics, MFU — happens once in `on_train_end`,
after which every rank holds the same `Metrics` in `self.metrics`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from ftbench.contracts import env as E
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.results import Metrics
from ftbench_trainer.measure import distributed
from ftbench_trainer.measure.mfu import mfu_percent, peak_flops, training_flops
from ftbench_trainer.measure.stop import StopController
from ftbench_trainer.measure.system import GpuSummary, SystemSampler
from ftbench_trainer.measure.timing import (
    StepRecord,
    StepTimer,
    coefficient_of_variation,
    percentile,
    steady_state_start,
)
from ftbench_trainer.measure.tokens import TokenCounter
from ftbench_trainer.report import ProgressSink, ProgressUpdate

log = logging.getLogger(__name__)


@dataclass
class RankReport:
    """What one rank contributes to the final metrics (gathered once at the end)."""

    runtime: float = 0.0
    step_times: list[float] = field(default_factory=list)
    samples: int = 0
    padded_tokens: int = 0
    non_padding_tokens: int = 0
    padded_length_squared: int = 0
    steady_tokens: int = 0
    steady_seconds: float = 0.0
    warmup_seconds: float = 0.0
    cpu_percent: float = 0.0
    cpu_memory_percent: float = 0.0
    gpus: list[GpuSummary] = field(default_factory=list)
    gpu_name: str = ""
    max_memory_allocated: int = 0
    max_memory_reserved: int = 0
    uncounted_forwards: int = 0


def distributed_mode() -> str:
    """accelerate's distributed type in effect (e.g. NO, MULTI_GPU, MULTI_CPU, FSDP)."""
    try:
        from accelerate.state import PartialState

        return str(PartialState().distributed_type.value)
    except Exception:  # accelerate state not initialised: one plain process
        return "NO"


def _delta(a: StepRecord | None, b: StepRecord) -> tuple[int, int, int, int]:
    if a is None:
        return b.samples, b.padded_tokens, b.non_padding_tokens, b.padded_length_squared
    return (
        b.samples - a.samples,
        b.padded_tokens - a.padded_tokens,
        b.non_padding_tokens - a.non_padding_tokens,
        b.padded_length_squared - a.padded_length_squared,
    )


class MeasureCallback(TrainerCallback):
    """Counts, times, samples and stops; `metrics` is set on every rank after training."""

    def __init__(
        self,
        plan: LaunchPlan,
        *,
        dataset_tokens_per_sample: float,
        progress: ProgressSink | None = None,
        sample_interval: float | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.plan = plan
        self.dataset_tokens_per_sample = dataset_tokens_per_sample
        self.progress = progress
        self.clock = clock
        self.tokens = TokenCounter()
        self.timer = StepTimer()
        self.stop = StopController(plan.stop, agree=self._agree)
        self.stopped_by = "completed"
        interval = sample_interval or float(os.environ.get(E.FTBENCH_SAMPLE_INTERVAL, "1.0"))
        # One GPU per rank; distributedBackend None runs one DataParallel process over all of them.
        gpus = max(1, plan.topology.gpus_per_node // plan.topology.processes_per_node)
        self.sampler = SystemSampler(
            local_rank=distributed.local_rank() * gpus, use_gpu=not plan.use_cpu, interval=interval, gpus=gpus
        )
        self.metrics: Metrics | None = None
        self.distributed_mode = "NO"
        self.world_size = 1
        self.model_parameters = 0
        self.trainable_parameters = 0
        self.layers = 0
        self.hidden = 0
        self._hooks: list[Any] = []
        self._last_progress = float("-inf")
        self._max_steps = 0

    @staticmethod
    def _agree(flags: tuple[bool, bool]) -> tuple[bool, bool]:
        warm, stop = distributed.any_true(flags)
        return warm, stop

    # ------------------------------------------------------------------ events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs["model"]
        self._hooks = self.tokens.attach(model, kwargs["train_dataloader"])
        self.distributed_mode = distributed_mode()
        self.world_size = distributed.world_size()
        self._count_parameters(model)
        self._max_steps = int(state.max_steps or 0)
        self.sampler.start()

    def _count_parameters(self, model: Any) -> None:
        total = trainable = 0
        for p in model.parameters():
            n = p.numel()
            total += n
            trainable += n if p.requires_grad else 0
        if self.distributed_mode == "FSDP" and not any(hasattr(p, "_local_tensor") for p in model.parameters()):
            # FSDP1 exposes each rank's shard only: the model is the sum over ranks.
            sums = distributed.gather((total, trainable))
            total, trainable = sum(s[0] for s in sums), sum(s[1] for s in sums)
        self.model_parameters, self.trainable_parameters = total, trainable
        config = getattr(model, "config", None)
        self.layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        self.hidden = int(getattr(config, "hidden_size", 0) or 0)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.timer.start is None:
            self.timer.start = self.clock()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        decision = self.stop.on_step_end(len(self.timer.steps), self.timer.elapsed(self.clock()))
        last = decision.stop or (self._max_steps > 0 and state.global_step >= self._max_steps)
        if last:
            # The GPU may still be running this step's kernels: wait once, at the very end only.
            _synchronize(self.plan.use_cpu)
        c = self.tokens.committed
        self.timer.steps.append(
            StepRecord(self.clock(), c.samples, c.padded_tokens, c.non_padding_tokens, c.padded_length_squared)
        )
        if decision.stop:
            control.should_training_stop = True
            self.stopped_by = decision.reason
        elif args.max_steps and args.max_steps > 0 and state.global_step >= args.max_steps:
            self.stopped_by = "maxSteps"
        self._report_progress(state, last)

    def _report_progress(self, state: Any, last: bool) -> None:
        if self.progress is None or distributed.rank() != 0:
            return
        now = self.clock()
        if not last and now - self._last_progress < self.plan.output.progress_interval_seconds:
            return
        self._last_progress = now
        elapsed = self.timer.elapsed(now)
        step = state.global_step
        total = self._max_steps
        # Rank-local count times world size: an estimate (exact totals come with the result).
        tokens = self.tokens.committed.padded_tokens * self.world_size
        eta = (elapsed / step) * (total - step) if step and total else None
        self.progress.update(
            ProgressUpdate(
                step=step,
                total_steps=total,
                elapsed_seconds=elapsed,
                tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
                eta_seconds=eta,
            )
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.sampler.stop()
        for h in self._hooks:
            h.remove()
        reports = distributed.gather(self._rank_report())
        self.metrics = self._combine(reports)

    # ------------------------------------------------------------------ results

    def _window(self) -> tuple[int, float]:
        """(index of the first measured step, seconds of warmup excluded)."""
        w = self.stop.warmup_end_step
        if w is None or w >= len(self.timer.steps):
            return 0, 0.0  # no warmup, or training ended inside it: measure every step
        return w, self.timer.steps[w - 1].end - (self.timer.start or 0.0)

    def _rank_report(self) -> RankReport:
        steps = self.timer.steps
        if not steps or self.timer.start is None:
            return RankReport(uncounted_forwards=self.tokens.uncounted_forwards)
        first, warmup = self._window()
        before = steps[first - 1] if first > 0 else None
        start = before.end if before else self.timer.start
        end = steps[-1].end
        samples, padded, non_padding, lsq = _delta(before, steps[-1])
        times = self.timer.step_times()[first:]
        s = first + steady_state_start(len(times))
        steady_from = steps[s - 1] if s > 0 else None
        steady_tokens = _delta(steady_from, steps[-1])[1]
        steady_seconds = end - (steady_from.end if steady_from else self.timer.start)
        cpu, mem = self.sampler.cpu_summary(start, end)
        allocated = reserved = 0
        if not self.plan.use_cpu:
            allocated, reserved = _cuda_peaks()
        return RankReport(
            runtime=end - start,
            step_times=times,
            samples=samples,
            padded_tokens=padded,
            non_padding_tokens=non_padding,
            padded_length_squared=lsq,
            steady_tokens=steady_tokens,
            steady_seconds=steady_seconds,
            warmup_seconds=warmup,
            cpu_percent=cpu,
            cpu_memory_percent=mem,
            gpus=self.sampler.gpu_summaries(start, end),
            gpu_name=self.sampler.gpu_name,
            max_memory_allocated=allocated,
            max_memory_reserved=reserved,
            uncounted_forwards=self.tokens.uncounted_forwards,
        )

    def _combine(self, reports: list[RankReport]) -> Metrics:
        r0 = reports[0]
        runtime = max(r.runtime for r in reports)
        steps = len(r0.step_times)
        samples = sum(r.samples for r in reports)
        tokens = sum(r.padded_tokens for r in reports)
        gpus = max(1, self.plan.topology.number_gpus)

        def rate(x: float, seconds: float = runtime) -> float:
            return x / seconds if seconds > 0 else 0.0

        gpu = [g for r in reports for g in r.gpus]
        flops = training_flops(
            parameters=self.model_parameters,
            trainable=self.trainable_parameters,
            tokens=tokens,
            layers=self.layers,
            hidden=self.hidden,
            length_squared=sum(r.padded_length_squared for r in reports),
        )
        peak = peak_flops(r0.gpu_name, self.plan.training.torch_dtype.value)
        tokens_per_second = rate(tokens)
        dataset_tps = rate(samples * self.dataset_tokens_per_sample)
        return Metrics(
            **_gpu_spread(gpu),
            gpu_memory_utilization_peak_percent=max((g.memory_peak_percent for g in gpu), default=0.0),
            gpu_max_memory_allocated_bytes=max(r.max_memory_allocated for r in reports),
            gpu_max_memory_reserved_bytes=max(r.max_memory_reserved for r in reports),
            cpu_compute_utilization_percent=_avg([r.cpu_percent for r in reports]),
            cpu_memory_utilization_percent=_avg([r.cpu_memory_percent for r in reports]),
            train_runtime_seconds=runtime,
            train_steps=steps,
            train_samples=samples,
            train_tokens=tokens,
            train_non_padding_tokens=sum(r.non_padding_tokens for r in reports),
            train_samples_per_second=rate(samples),
            train_steps_per_second=rate(steps),
            train_tokens_per_second=tokens_per_second,
            train_tokens_per_gpu_per_second=tokens_per_second / gpus,
            dataset_tokens_per_second=dataset_tps,
            dataset_tokens_per_second_per_gpu=dataset_tps / gpus,
            step_time_p50_seconds=percentile(r0.step_times, 50),
            step_time_p95_seconds=percentile(r0.step_times, 95),
            step_time_cv=coefficient_of_variation(r0.step_times),
            steady_state_tokens_per_second=rate(
                sum(r.steady_tokens for r in reports), max(r.steady_seconds for r in reports)
            ),
            warmup_excluded_seconds=r0.warmup_seconds,
            mfu_percent=mfu_percent(flops, runtime, self.plan.topology.number_gpus, peak),
            model_parameters=self.model_parameters,
            trainable_parameters=self.trainable_parameters,
            stopped_by=self.stopped_by,
        )


def _avg(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# Metrics field stem, GpuSummary attribute, unit suffix.
_GPU_FIELDS = (
    ("gpu_compute_utilization", "compute_percent", "percent"),
    ("gpu_memory_utilization", "memory_percent", "percent"),
    ("gpu_power", "power_percent", "percent"),
    ("gpu_power", "power_watts", "watts"),
)


def _gpu_spread(gpus: list[GpuSummary]) -> dict[str, float]:
    """Seed note 1: min/avg/max across GPUs of each GPU's mean over the run (0.0 without GPUs)."""
    out: dict[str, float] = {}
    for stem, attr, unit in _GPU_FIELDS:
        values = [getattr(g, attr) for g in gpus]
        out[f"{stem}_min_{unit}"] = min(values, default=0.0)
        out[f"{stem}_avg_{unit}"] = _avg(values)
        out[f"{stem}_max_{unit}"] = max(values, default=0.0)
    return out


def _synchronize(use_cpu: bool) -> None:
    if use_cpu:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _cuda_peaks() -> tuple[int, int]:
    import torch

    if not torch.cuda.is_available():
        return 0, 0
    return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())
