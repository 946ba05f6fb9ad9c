"""A CPU run's peak tensor memory: the quantity the memory predictor predicts, measured on CPU ranks.

A GPU has `torch.cuda.max_memory_allocated`; CPU memory has no allocator statistics, so on CPU
ranks the predictor's own `StorageTracker` (the rule the prediction counts by) follows live tensor
storage through the first optimizer step: forward and backward, then, from the optimizer's step
pre-hook on, the step and zero_grad. That step makes the optimizer state, which every later step
carries through its forward and backward, so the steady-state peak is the larger of (the forward
and backward peak plus that state) and the optimizer phase's peak.

Why the first step: the steady-state window leaves it out (the warm-up rule keeps at least one step
out when there are two or more; a spec's `warmupSteps: 0` keeps it in, and then nothing is
tracked), and it already carries first-call costs. The tracker's per-op work lands in it, and so in
the whole-window rates, which include warm-up (docs/measurements.md says so); GPU runs are not
tracked.
"""

from __future__ import annotations

from typing import Any


class TensorPeakProbe:
    """Tracks the first optimizer step of a CPU rank; `peak` is 0 until it ends (and where untracked),
    `batch` the (rows, length) of that step's largest micro-batch once the caller records it."""

    def __init__(self) -> None:
        self.peak = 0
        self.batch: tuple[int, int] = (0, 0)
        self._model: Any = None
        self._optimizer: Any = None
        self._tracker: Any = None
        self._hook: Any = None

    def attach(self, model: Any, optimizer: Any) -> None:
        """Track this model's first step; an optimizer without step hooks (DeepSpeed's) is not tracked."""
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps torch's
        if model is not None and hasattr(inner, "register_step_pre_hook"):
            self._model, self._optimizer = model, inner

    def step_begin(self) -> None:
        if self._optimizer is None or self._tracker is not None:
            return
        from ftbench_trainer.measure.storage import StorageTracker

        tracker = StorageTracker(settle=True)  # the optimizer phase counts once the collectives let go
        tracker.add_all(self._model.parameters())
        tracker.add_all(self._model.buffers())
        self._hook = self._optimizer.register_step_pre_hook(lambda *_: tracker.enter_phase("optimizer"))
        tracker.__enter__()
        self._tracker = tracker

    def step_end(self, largest_batch: tuple[int, int]) -> None:
        """End the tracked step; `largest_batch` is the largest micro-batch the rank has trained so far."""
        tracker, optimizer = self._tracker, self._optimizer
        if tracker is None or optimizer is None:
            return
        self.batch = largest_batch
        tracker.finish()
        tracker.__exit__(None, None, None)
        self._hook.remove()
        self._optimizer = None  # one step only
        state = [t for s in optimizer.state.values() for t in s.values() if hasattr(t, "untyped_storage")]
        before_step = max((p.bytes for name, p in tracker.peaks.items() if name != "optimizer"), default=0)
        at_step = tracker.peaks["optimizer"].bytes if "optimizer" in tracker.peaks else 0
        self.peak = max(before_step + tracker.bytes_of(state), at_step)
