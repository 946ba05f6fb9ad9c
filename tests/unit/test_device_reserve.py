"""The allocator's reserve in the device-level peak (ftbench.predict.device_memory): a fraction of what forward and
backward hold beyond state, larger where an MoE engine's expert tensors change shape from step to step, and
larger again where fastMoe dispatches tokens across expert-parallel ranks."""

from __future__ import annotations

from ftbench.api.profile import DEFAULT_GPU_MEMORY, GpuMemory
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit
from ftbench.predict.constants import (
    DISPATCHED_RESERVE_FRACTION,
    RESERVE_FRACTION,
    ROUTED_RESERVE_FRACTION,
    RUNTIME_OVERHEAD,
)
from ftbench.predict.device_memory import device_features, device_memory, reserve_fraction

GIB = 2**30


def prediction(expert_shapes_vary: bool, expert_parallel: int = 0) -> MemoryPrediction:
    split = MemorySplit(parameters_bytes=6 * GIB, gradients_bytes=0, optimizer_bytes=0, activations_bytes=20 * GIB)
    return MemoryPrediction(
        peak_bytes=26 * GIB, split=split, phase="backward", activations_peak_bytes=20 * GIB, device="cuda",
        world_size=2, sharding="FULL_SHARD", traced_parameters=1, trainable_parameters=1, seconds=1.0,
        expert_shapes_vary=expert_shapes_vary, expert_parallel=expert_parallel,
    )  # fmt: skip


def test_varying_expert_shapes_add_to_the_reserve_and_not_to_the_verdict() -> None:
    gpu = DEFAULT_GPU_MEMORY["NVIDIA-A100-SXM4-80GB"]
    dense, moe = device_memory(prediction(False), gpu), device_memory(prediction(True), gpu)
    assert dense.term("allocatorReserve") == int(RESERVE_FRACTION * 20 * GIB)
    assert moe.term("allocatorReserve") == int((RESERVE_FRACTION + ROUTED_RESERVE_FRACTION) * 20 * GIB)
    assert reserve_fraction(prediction(True)) > reserve_fraction(prediction(False)) > 0
    assert moe.total_bytes > dense.total_bytes and moe.required_bytes == dense.required_bytes


def test_the_fit_sees_the_routed_activations_as_their_own_cause() -> None:
    assert device_features(prediction(False))["reserve_of_routed_activations"] == 0.0
    assert device_features(prediction(True))["reserve_of_routed_activations"] == 20.0


def test_expert_parallel_dispatch_adds_to_the_reserve_above_one_rank_of_experts() -> None:
    gpu = DEFAULT_GPU_MEMORY["NVIDIA-A100-SXM4-80GB"]
    routed = device_memory(prediction(True), gpu).term("allocatorReserve")
    # fastMoe 1 runs ScatterMoE's kernels without an all-to-all: no dispatch buffers.
    assert device_memory(prediction(True, expert_parallel=1), gpu).term("allocatorReserve") == routed
    dispatched = device_memory(prediction(True, expert_parallel=4), gpu)
    assert dispatched.term("allocatorReserve") == int(
        (RESERVE_FRACTION + ROUTED_RESERVE_FRACTION + DISPATCHED_RESERVE_FRACTION) * 20 * GIB
    )
    features = device_features(prediction(True, expert_parallel=4))
    assert features["reserve_of_dispatched_activations"] == 20.0
    assert device_features(prediction(True, expert_parallel=1))["reserve_of_dispatched_activations"] == 0.0


def test_fsdp1_and_fsdp2_unsharded_gradients_count_the_same_way() -> None:
    """FSDP1's unsharded gradient is computed beside the peak, FSDP2's is part of the traced peak: the device-level
    terms, the total and the verdict come out the same (issue 60.6)."""
    gpu = DEFAULT_GPU_MEMORY["NVIDIA-A100-SXM4-80GB"]
    fsdp1 = prediction(False).model_copy(update={"unsharded_gradient_bytes": 30 * GIB})
    fsdp2 = fsdp1.model_copy(update={"peak_bytes": 56 * GIB, "unsharded_gradients_in_peak": True})
    one, two = device_memory(fsdp1, gpu), device_memory(fsdp2, gpu)
    assert one.terms == two.terms and one.total_bytes == two.total_bytes and one.fits == two.fits
    assert two.term("tensors") == 26 * GIB and two.term("unshardedGradients") == 30 * GIB
    assert two.required_bytes == two.total_bytes - two.term("allocatorReserve") - 30 * GIB


def test_the_profiles_context_default_is_the_fitted_one() -> None:
    """The API states the runtimeOverhead default (it cannot import ftbench.predict); constants.py states the fit."""
    assert GpuMemory(capacity="80Gi").runtime_overhead == RUNTIME_OVERHEAD
