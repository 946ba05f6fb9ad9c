"""`MeasureCallback` driven like a Trainer drives it, with a synthetic clock and real tensors.

Checks the windowing a real run cannot pin down cheaply: the auto-stop warmup is excluded from
runtime and counts, and stop_after_seconds stops all steps on the step the clock passes.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import make_plan

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ftbench_trainer.measure.callback import MeasureCallback  # noqa: E402


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _drive(callback: MeasureCallback, clock: FakeClock, step_seconds: float, max_steps: int) -> int:
    """Run up to max_steps steps of one batch (2 rows, 3 real + 1 pad tokens); returns steps run."""
    from transformers import TrainerControl, TrainerState

    model = torch.nn.Linear(4, 4)
    # A training set of 4 rows (one optimizer step of the plan's batch 4), each with a trained label.
    loader = SimpleNamespace(dataset=[[1, 2], [3, 0], [5, 6], [7, 8]], collate_fn=lambda rows: {
        "input_ids": torch.tensor(rows), "attention_mask": torch.tensor([[1, 1], [1, 0]]),
        "labels": torch.tensor(rows),
    })  # fmt: skip
    args = SimpleNamespace(max_steps=max_steps)
    state, control = TrainerState(max_steps=max_steps), TrainerControl()
    callback.on_train_begin(args, state, control, model=model, train_dataloader=loader)
    for _ in range(max_steps):
        callback.on_step_begin(args, state, control)
        batch = loader.collate_fn([[1, 2], [3, 0]])
        model(batch["input_ids"].float().repeat(1, 2))
        clock.now += step_seconds
        state.global_step += 1
        callback.on_step_end(args, state, control)
        if control.should_training_stop:
            break
    callback.on_train_end(args, state, control)
    return state.global_step


def test_auto_stop_excludes_the_warmup(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, tmp_path / "m", tmp_path / "d", autoStopMethod="WARMUP_60S_STABLE_120S_OR_10_STEPS")
    stop = plan.stop.model_copy(
        update={"auto_stop_warmup_seconds": 3.0, "auto_stop_stable_seconds": 4.0, "auto_stop_stable_steps": 2}
    )
    plan = plan.model_copy(update={"stop": stop})
    clock = FakeClock()
    cb = MeasureCallback(plan, dataset_tokens_per_sample=10.0, clock=clock, sample_interval=60)
    # 1 s steps: warmup = steps 1-3 (ends at 3 s), then 4 s of stable steps: stops after step 7.
    assert _drive(cb, clock, 1.0, 100) == 7
    m = cb.metrics
    assert m is not None
    assert m.stopped_by == "autoStop"
    assert m.warmup_excluded_seconds == pytest.approx(3.0)
    assert m.train_steps == 4 and m.train_runtime_seconds == pytest.approx(4.0)
    assert m.train_samples == 8 and m.train_tokens == 16 and m.train_non_padding_tokens == 12
    assert m.train_tokens_per_second == pytest.approx(4.0)
    assert m.dataset_tokens_per_second == pytest.approx(8 * 10.0 / 4.0)
    assert m.step_time_p50_seconds == pytest.approx(1.0) and m.step_time_cv == pytest.approx(0.0)


def test_stop_after_seconds_and_max_steps(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, tmp_path / "m", tmp_path / "d", stopAfterSeconds=2.5, maxSteps=10)
    clock = FakeClock()
    cb = MeasureCallback(plan, dataset_tokens_per_sample=1.0, clock=clock, sample_interval=60)
    assert _drive(cb, clock, 1.0, 10) == 3
    assert cb.metrics is not None and cb.metrics.stopped_by == "stopAfterSeconds"
    assert cb.metrics.train_steps == 3 and cb.metrics.warmup_excluded_seconds == 0.0
    # psutil's samples: this process's resident memory within the node's memory in use (ado's quantity).
    assert 0 < cb.metrics.cpu_memory_utilization_percent <= cb.metrics.node_memory_used_percent < 100

    plan = make_plan(tmp_path, tmp_path / "m", tmp_path / "d", maxSteps=4)
    clock = FakeClock()
    cb = MeasureCallback(plan, dataset_tokens_per_sample=1.0, clock=clock, sample_interval=60)
    assert _drive(cb, clock, 0.5, 4) == 4
    assert cb.metrics is not None and cb.metrics.stopped_by == "maxSteps"
    assert cb.metrics.train_runtime_seconds == pytest.approx(2.0)
