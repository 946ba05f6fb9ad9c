"""AdamW stepped on FSDP2's local shards (predict.trace.ShardOptimizer) against AdamW on the DTensors themselves,
as the engines run it: the same storages, made and freed in the same order, so the same trace byte for byte
(dense and MoE, full fine-tuning and LoRA, FULL_SHARD and SHARD_GRAD_OP, with and without clipping)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench_trainer.predict import trace
from ftbench_trainer.predict.model import architecture_config
from ftbench_trainer.predict.trace import FsdpShape, recorded_step
from tests.trainer.test_predict_depth import DENSE, MOE, shape


class OnDTensors:
    """AdamW on the parameters as they are (DTensors under FSDP2): what the engines step."""

    def __init__(self, params: list, step_shape: trace.StepShape) -> None:
        self.optimizer = trace._optimizer(params, step_shape)
        self.state = self.optimizer.state

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    ("architecture", "method", "fsdp", "clip"),
    [
        (DENSE, "full", FsdpShape(ranks=2, reshard_after_forward=True), 1.0),
        (DENSE, "lora", FsdpShape(ranks=4, reshard_after_forward=False), None),
        (MOE, "full", FsdpShape(ranks=4, reshard_after_forward=True), 1.0),
    ],
)
def test_adamw_on_the_shards_traces_what_adamw_on_the_dtensors_does(
    architecture: dict, method: str, fsdp: FsdpShape, clip: float | None, monkeypatch: pytest.MonkeyPatch
):
    config = architecture_config(architecture)
    step = dataclasses.replace(shape(method), max_grad_norm=clip)
    on_shards = recorded_step(config, step, fsdp)
    monkeypatch.setattr(trace, "ShardOptimizer", OnDTensors)
    on_dtensors = recorded_step(config, step, fsdp)
    assert on_shards.log == on_dtensors.log and on_shards.holders == on_dtensors.holders
    untimed = {"seconds": 0.0}
    assert dataclasses.replace(on_shards.trace, **untimed) == dataclasses.replace(on_dtensors.trace, **untimed)
    assert on_shards.trace.phases["optimizer"].optimizer > 0
