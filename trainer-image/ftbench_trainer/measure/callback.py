"""`MeasureCallback`: the one transformers `TrainerCallback` both engines run with.

Per step it only reads the clock, copies a few Python ints and (for clock-based stops) exchanges
two flags. It only adapts Trainer events into observations: at `on_train_end` each rank cuts its
measured window (`window.step_window`), the one collective gathers every rank's `RankReport`, and
the pure `combine.combine` turns them into the same `Metrics` in `self.metrics` on every rank.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from transformers import TrainerCallback

from ftbench.contracts import env as E
from ftbench.contracts.environment import DeepSpeedInEffect, FsdpInEffect
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.progress import MEMORY_CPU_RSS, MEMORY_GPU_ALLOCATED
from ftbench.contracts.results import LOSS_CURVE_LIMIT, Metrics
from ftbench.stats.intervals import rate_interval
from ftbench.stats.noise import HostLoad
from ftbench_trainer.measure import distributed, rows, shards
from ftbench_trainer.measure.combine import ModelSize, RankReport, RunFacts, combine
from ftbench_trainer.measure.stop import Steady, StopController
from ftbench_trainer.measure.system import SystemSampler
from ftbench_trainer.measure.tensor_peak import TensorPeakProbe
from ftbench_trainer.measure.timing import StepRecord, StepTimer
from ftbench_trainer.measure.tokens import TokenCounter
from ftbench_trainer.measure.window import step_window
from ftbench_trainer.report import ProgressSink, ProgressUpdate

log = logging.getLogger(__name__)

# How often (seconds, at most) the live steady-state interval is recomputed from the whole window.
LIVE_INTERVAL_SECONDS = 5.0

# What asking accelerate for its state raises where no Accelerator was built (ValueError in 1.x),
# in older releases (AttributeError, RuntimeError), or without accelerate at all.
NO_ACCELERATE_STATE: tuple[type[Exception], ...] = (ImportError, AttributeError, ValueError, RuntimeError)


def distributed_mode() -> str:
    """accelerate's distributed type in effect (e.g. NO, MULTI_GPU, MULTI_CPU, FSDP)."""
    try:
        from accelerate.state import PartialState

        return str(PartialState().distributed_type.value)
    except NO_ACCELERATE_STATE:  # accelerate state not initialised: one plain process
        return "NO"


class MeasureCallback(TrainerCallback):
    """Counts, times, samples and stops; `metrics` is set on every rank after training."""

    def __init__(
        self,
        plan: LaunchPlan,
        *,
        dataset_tokens_per_sample: float | None,
        rows_offered: int | None = None,
        progress: ProgressSink | None = None,
        live: ProgressSink | None = None,
        sample_interval: float | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.plan = plan
        self.dataset_tokens_per_sample = dataset_tokens_per_sample
        self.rows_offered = rows_offered
        self.rows_trained: int | None = None
        self.progress = progress  # rank 0's: the progress line, status.progress
        self.live = live  # each node's first rank's: its live metrics (ftbench_trainer.live_metrics)
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
        self.model_size = ModelSize()
        self._hooks: list[Any] = []
        self.shard_probe = shards.ShardProbe()
        self.tensor_peak = TensorPeakProbe()
        self.fsdp: FsdpInEffect | None = None
        self.deepspeed: DeepSpeedInEffect | None = None
        self.losses: list[float] = []
        self.last_loss: float | None = None
        self.activation_checkpointing = False
        self.attention_implementation = ""
        self.liger_kernel = False
        self._last_progress = float("-inf")
        self._last_interval = float("-inf")
        self._steady_relative: float | None = None  # this rank's steady tokens/s interval so far, +- fraction
        self._max_steps = 0
        self.setup_seconds = 0.0  # this process's start to its first step (device time before training)

    @staticmethod
    def _agree(flags: tuple[bool, ...]) -> tuple[bool, ...]:
        return distributed.any_true(flags)

    # ------------------------------------------------------------------ events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs["model"]
        self.count_rows(*rows.training_set(kwargs["train_dataloader"]))  # before attach wraps its collator
        self.tokens.attention = attention_in_effect(model)
        self._hooks = self.tokens.attach(model, kwargs["train_dataloader"])
        self.distributed_mode = distributed_mode()
        self.world_size = distributed.world_size()
        self.fsdp = shards.fsdp_in_effect(model, _state_dict_type())
        self.deepspeed = deepspeed_in_effect()
        self.activation_checkpointing = shards.activation_checkpointing(model)
        self.attention_implementation = attention_in_effect(model)
        self.liger_kernel = liger_in_effect(model)
        self.shard_probe.attach(model, kwargs.get("optimizer"))
        # Only where the first step stays out of the steady-state window (warmupSteps 0 keeps it in).
        if self.plan.use_cpu and self.plan.stop.warmup_steps != 0:
            self.tensor_peak.attach(model, kwargs.get("optimizer"))
        self._count_parameters(model)
        self._max_steps = int(state.max_steps or 0)
        self.sampler.start()

    def count_rows(self, dataset: Any, collate: Any) -> None:
        """rowsTrained of the engine's training set (ftbench_trainer.measure.rows); refuses a set that cannot
        fill one optimizer step. Every rank counts (same set, same answer), so every rank refuses alike and
        none waits alone. An engine calls it before training where an empty set would fail first (trl)."""
        t = self.plan.training
        if self.rows_trained is not None or t.dataset_image_field:  # image rows: collating would process them all
            return
        self.rows_trained = rows.trained_rows(dataset, collate)
        rows.check_one_step(self.rows_trained, self.plan.topology.batch_size * t.gradient_accumulation_steps,
                            offered=self.rows_offered, max_length=t.model_max_length,
                            dataset_id=self.plan.dataset.id)  # fmt: skip

    def _count_parameters(self, model: Any) -> None:
        total = trainable = 0
        for p in model.parameters():
            n = int(getattr(p, "ds_numel", 0) or p.numel())  # ZeRO-3 partitions leave numel() at 0
            total += n
            trainable += n if p.requires_grad else 0
        nbytes = shards.parameter_bytes(model)
        full = shards.full_parameter_count_and_bytes(model)
        if self.distributed_mode == "FSDP" and not any(hasattr(p, "_local_tensor") for p in model.parameters()):
            # FSDP1 exposes each rank's shard only (none of it under NO_SHARD's replicas is
            # missing): the trainable count is the sum over the ranks that own each shard.
            sums = distributed.gather((total, trainable))
            shard_sum = sum(s[0] for s in sums)
            trainable = round(sum(s[1] for s in sums) * (full[0] / shard_sum if full and shard_sum else 1))
            total = full[0] if full else shard_sum
        if full is not None:
            nbytes = full[1]
        config = getattr(model, "config", None)
        self.model_size = ModelSize(
            parameters=total,
            trainable=trainable,
            layers=int(getattr(config, "num_hidden_layers", 0) or 0),
            hidden=int(getattr(config, "hidden_size", 0) or 0),
            parameter_bytes=nbytes,
        )

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.timer.start is None:
            self.timer.start = self.clock()
            self.setup_seconds = process_age_seconds()
        self.tensor_peak.step_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.tensor_peak.step_end(self.tokens.committed.largest)
        decision = self.stop.on_step_end(
            len(self.timer.steps), self.timer.elapsed(self.clock()), self._steady(self.stop.precise, ending=True)
        )
        last = decision.stop or (self._max_steps > 0 and state.global_step >= self._max_steps)
        if last:
            # The GPU may still be running this step's kernels: wait once, at the very end only.
            _synchronize(self.plan.use_cpu)
        self.shard_probe.after_step()
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

    def _steady(self, needed: bool, ending: bool = False) -> Steady | None:
        """The steady window so far, cut as the result's is, or None when not `needed`. `ending`: this
        step is ending and not recorded yet; it counts as ending now, so a run that stops here reports
        the very window the decision was made on."""
        if not needed:
            return None
        timer = self.timer
        if ending:
            c = self.tokens.committed
            now = StepRecord(self.clock(), c.samples, c.padded_tokens, c.non_padding_tokens, c.padded_length_squared)
            timer = StepTimer(timer.start, [*timer.steps, now])
        window = step_window(timer, self.stop.warmup_end_step, self.plan.stop.warmup_steps)
        return Steady(window.steady_step_tokens, window.steady_step_times)

    def _report_progress(self, state: Any, last: bool) -> None:
        sink = self.progress if distributed.rank() == 0 else None
        if sink is None and self.live is None:
            return
        now = self.clock()
        every = self.plan.output.progress_interval_seconds
        due = last or now - self._last_progress >= every
        if sink is not None and due:
            self._last_progress = now
        if last or now - self._last_interval >= min(every, LIVE_INTERVAL_SECONDS):
            # Recomputed from the whole window now and then, not on every step of a long run.
            self._last_interval = now
            steady = self._steady(True)
            found = rate_interval(steady.tokens, steady.seconds) if steady else None
            self._steady_relative = found.relative_half_width if found else None
        update = self._progress_update(state, now)
        if self.live is not None:
            self.live.update(update)
        if sink is not None and due:
            sink.update(update)

    def _progress_update(self, state: Any, now: float) -> ProgressUpdate:
        elapsed = self.timer.elapsed(now)
        step = state.global_step
        total = self._max_steps
        # Rank-local count times world size: an estimate (exact totals come with the result).
        tokens = self.tokens.committed.padded_tokens * self.world_size
        eta = (elapsed / step) * (total - step) if step and total else None
        peak, kind = peak_memory(self.plan.use_cpu)
        return ProgressUpdate(
            step=step,
            total_steps=total,
            elapsed_seconds=elapsed,
            tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
            eta_seconds=eta,
            loss=self.last_loss,
            step_time_seconds=elapsed / step if step else None,
            peak_memory_bytes=peak,
            memory_kind=kind,
            steady_ci95_relative=self._steady_relative,
        )

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        loss = (logs or {}).get("loss")
        if not isinstance(loss, int | float):
            return
        self.last_loss = float(f"{loss:.6g}")
        if len(self.losses) < LOSS_CURVE_LIMIT:
            self.losses.append(self.last_loss)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.sampler.stop()
        for h in self._hooks:
            h.remove()
        self.shard_probe.detach()
        reports = distributed.gather(self._rank_report())
        self.metrics = combine(reports, self._run_facts()).model_copy(update={"loss_curve": list(self.losses)})
        # Every rank has the same metrics; rank 0 alone says so.
        if distributed.rank() == 0 and reports[0].gpu_name and not self.metrics.gpu_peak_flops:
            log.warning(
                "no peak FLOP/s known for GPU %r: mfuPercent is 0; trainModelFlops (%.4g) is in the result to "
                "divide by its peak (docs/measurements.md)",
                reports[0].gpu_name,
                self.metrics.train_model_flops,
            )

    # ------------------------------------------------------------------ results

    def _rank_report(self) -> RankReport:
        window = step_window(self.timer, self.stop.warmup_end_step, self.plan.stop.warmup_steps)
        if not window.step_times:  # no step ended: nothing was measured
            return RankReport(uncounted_forwards=self.tokens.uncounted_forwards)
        cpu = self.sampler.cpu_summary(window.start, window.end)
        allocated = reserved = 0
        if not self.plan.use_cpu:
            allocated, reserved = _cuda_peaks()
        return RankReport(
            window=window,
            cpu_percent=cpu.cpu_percent,
            cpu_memory_percent=cpu.memory_percent,
            node_memory_percent=cpu.node_memory_percent,
            host=HostLoad(steal_percent=cpu.steal_percent, contended_threads=cpu.contended_threads),
            gpus=tuple(self.sampler.gpu_summaries(window.start, window.end)),
            gpu_name=self.sampler.gpu_name,
            max_memory_allocated=allocated,
            max_memory_reserved=reserved,
            peak_rss=peak_rss_bytes(),
            tensor_peak=self.tensor_peak.peak,
            # The batch the measured peak is for: the tracked step's on CPU, the run's largest on GPUs.
            peak_batch=self.tensor_peak.batch if self.plan.use_cpu else self.tokens.committed.largest,
            uncounted_forwards=self.tokens.uncounted_forwards,
            parameter_bytes=self.shard_probe.parameter_bytes,
            gradient_bytes=self.shard_probe.gradient_bytes,
            optimizer_state_bytes=self.shard_probe.optimizer_state_bytes,
            setup_seconds=self.setup_seconds,
        )

    def _run_facts(self) -> RunFacts:
        return RunFacts(
            number_gpus=self.plan.topology.number_gpus,
            torch_dtype=self.plan.training.torch_dtype.value,
            dataset_tokens_per_sample=self.dataset_tokens_per_sample,
            model=self.model_size,
            stopped_by=self.stopped_by,
            planned_steps=self._max_steps,
            rows_offered=self.rows_offered,
            rows_trained=self.rows_trained,
        )


def attention_in_effect(model: Any) -> str:
    """The attention implementation the loaded model runs (its config's `_attn_implementation`, which
    transformers sets when it loads or dispatches the model; a PEFT wrapper forwards to the base)."""
    config = getattr(model, "config", None)
    return str(getattr(config, "_attn_implementation", "") or "")


def liger_in_effect(model: Any) -> bool:
    """Whether Liger patched the model: liger-kernel replaces the forward of the model and of its
    norm, MLP and attention modules on the instance (`_apply_liger_kernel_to_instance`), so a forward
    function from the liger_kernel package is the trace of it."""
    for module in model.modules():
        forward = getattr(module.forward, "__func__", module.forward)
        if str(getattr(forward, "__module__", "")).startswith("liger_kernel"):
            return True
    return False


def deepspeed_in_effect() -> DeepSpeedInEffect | None:
    """DeepSpeed ZeRO as accelerate's DeepSpeed plugin runs it (the config the engine was built
    with, "auto" values filled in), None without DeepSpeed."""
    try:
        from accelerate.state import AcceleratorState

        plugin = getattr(AcceleratorState(), "deepspeed_plugin", None)
    except NO_ACCELERATE_STATE:  # no accelerate state: one plain process
        return None
    if plugin is None:
        return None
    zero = (getattr(plugin, "deepspeed_config", None) or {}).get("zero_optimization", {})
    return DeepSpeedInEffect(
        zero_stage=int(zero.get("stage", getattr(plugin, "zero_stage", 0)) or 0),
        offload_optimizer_device=str((zero.get("offload_optimizer") or {}).get("device", "none")),
        offload_param_device=str((zero.get("offload_param") or {}).get("device", "none")),
    )


def _state_dict_type() -> str:
    """accelerate's FSDP state dict type in effect (empty without an FSDP plugin)."""
    try:
        from accelerate.state import AcceleratorState

        plugin = getattr(AcceleratorState(), "fsdp_plugin", None)
    except NO_ACCELERATE_STATE:  # no accelerate state: one plain process
        return ""
    kind = getattr(plugin, "state_dict_type", None)
    return str(getattr(kind, "name", kind or ""))


def _synchronize(use_cpu: bool) -> None:
    if use_cpu:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_memory(use_cpu: bool) -> tuple[int, str]:
    """This process's peak memory so far and what it is (ftbench.contracts.progress): the CUDA
    allocator's peak on GPU, the peak resident set on CPU (Linux reports ru_maxrss in KiB)."""
    if not use_cpu:
        return _cuda_peaks()[0], MEMORY_GPU_ALLOCATED
    return peak_rss_bytes(), MEMORY_CPU_RSS


def process_age_seconds() -> float:
    """Seconds since this process started (its launch, imports, model and data loading so far)."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())


def peak_rss_bytes() -> int:
    """This process's peak resident set size since it started (Linux: ru_maxrss in KiB)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _cuda_peaks() -> tuple[int, int]:
    import torch

    if not torch.cuda.is_available():
        return 0, 0
    return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())
