"""FSDP state as accelerate and torch hold it: what trains upcast to float32 only under mixed precision
(accelerate's `prepare_model`), and the whole unsharded gradient `no_sync` keeps between accumulated
micro-steps, which the device-level peak counts and the fits/OOM verdict leaves out (docs/measurements.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import NEWEST_FMS, make_plan

from ftbench.api.profile import DEFAULT_GPU_MEMORY
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit
from ftbench.predict.device_memory import device_memory
from ftbench_trainer.predict.plan_step import FSDP1_MIXED_MASTER_FACTOR, sharding
from ftbench_trainer.predict.shard import Sharding, Sizes, unsharded_gradients

GIB = 2**30
A100 = "NVIDIA-A100-SXM4-80GB"


def _fsdp1_plan(tmp: Path, model_dir: Path, **spec: Any) -> LaunchPlan:
    """A 4-GPU FSDP1 plan (fms-hf-tuning's): built, never run, so no data is read."""
    fields = {"engine": "fms-hf-tuning", "fmsHfTuningVersion": NEWEST_FMS, "numberGpus": 4, "gpuModel": A100,
              "torchDtype": "bfloat16", "gradientAccumulationSteps": 4, "batchSize": 16, "fsdpVersion": 1, **spec}  # fmt: skip
    return make_plan(tmp, model_dir, tmp, **fields)


@pytest.mark.parametrize(
    ("mixed", "factor"),
    [
        ({}, 1.0),
        ({"accelerateConfigMixedPrecision": "bf16"}, FSDP1_MIXED_MASTER_FACTOR),
        ({"bf16": True}, FSDP1_MIXED_MASTER_FACTOR),
    ],
)
def test_what_trains_is_float32_only_under_mixed_precision(
    tmp_path: Path, tiny_model_dir: Path, mixed: dict[str, Any], factor: float
) -> None:
    s = sharding(_fsdp1_plan(tmp_path, tiny_model_dir, **mixed))
    assert s.fsdp1 and s.ranks == 4 and s.master_factor == factor
    assert s.no_sync  # gradientAccumulationSteps 4
    single = sharding(_fsdp1_plan(tmp_path, tiny_model_dir, gradientAccumulationSteps=1, **mixed))
    assert not single.no_sync


def test_no_sync_keeps_one_unsharded_copy_of_what_fsdp_trains() -> None:
    sizes = Sizes(parameters=1000, trainable=800, layer=100, root=200, root_trainable=200, experts=400,
                  experts_trainable=400, layer_experts=40)  # fmt: skip
    assert unsharded_gradients(Sharding("FULL_SHARD", 4, fsdp1=True, no_sync=True), sizes) == 800
    # fastMoe's experts are not FSDP's: only the rest is gathered into FSDP1's unsharded gradient.
    assert unsharded_gradients(Sharding("FULL_SHARD", 4, fsdp1=True, no_sync=True, expert_parallel=4), sizes) == 400
    assert unsharded_gradients(Sharding("FULL_SHARD", 4, fsdp1=True, no_sync=False), sizes) == 0
    assert unsharded_gradients(Sharding("FULL_SHARD", 1, fsdp1=True, no_sync=True), sizes) == 0
    assert unsharded_gradients(Sharding("FULL_SHARD", 4, fsdp1=False, no_sync=True), sizes) == 0  # FSDP2: traced
    assert unsharded_gradients(Sharding("ddp", 4, no_sync=True), sizes) == 0


def test_the_device_level_peak_counts_them_and_the_verdict_does_not() -> None:
    split = MemorySplit(parameters_bytes=0, gradients_bytes=0, optimizer_bytes=0, activations_bytes=0)
    prediction = MemoryPrediction(
        peak_bytes=60 * GIB, split=split, phase="backward", device="cuda", world_size=32, nodes=4,
        sharding="FULL_SHARD", traced_parameters=1, trainable_parameters=1, seconds=1.0,
        unsharded_gradient_bytes=131 * GIB,  # llama3.1-70b's bf16 gradients: ado ran such a run at 83 %
    )  # fmt: skip
    device = device_memory(prediction, DEFAULT_GPU_MEMORY[A100])
    assert device.term("unshardedGradients") == 131 * GIB
    assert device.percent == 100.0 and device.dominant == "unshardedGradients"
    assert device.required_bytes == device.total_bytes - 131 * GIB and device.fits
    without = device_memory(prediction.model_copy(update={"unsharded_gradient_bytes": 0}), DEFAULT_GPU_MEMORY[A100])
    assert without.required_bytes == device.required_bytes and without.term("unshardedGradients") == 0


def test_fsdp2_traces_accumulation_with_whole_unsharded_gradients(tmp_path: Path, tiny_model_dir: Path) -> None:
    """trl's FSDP2 under accelerate 1.11 on: the micro-steps before the last reduce nothing, so the traced second
    micro-step holds every parameter's whole unsharded gradient, not its shard (bench/fsdp_accumulation.py)."""
    from ftbench_trainer.predict.model import predict
    from ftbench_trainer.predict.stack import stack

    assert stack().fsdp2_no_sync  # this environment's accelerate (trl's engine)
    peaks = {}
    for ga in (1, 4):
        plan = make_plan(tmp_path, tiny_model_dir, tmp_path, numberGpus=2, device="cpu", gradientAccumulationSteps=ga)
        assert sharding(plan).kind == "FULL_SHARD" and not sharding(plan).fsdp1
        prediction = predict(plan, count_rows=False)
        peaks[ga] = prediction.peak_bytes
        gradient = prediction.trainable_parameters * 4  # float32
    assert peaks[4] - peaks[1] >= 0.9 * gradient > 0  # the shard would add half of it
