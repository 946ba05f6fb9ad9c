"""Device memory as the GPU counts it: the traced tensor peak plus what a training process holds beside it.

NVML (nvidia-smi, ado's `gpu_memory_utilization_peak`, ftbench's `gpuMemoryUtilizationPeakPercent`)
counts every byte a process has from the driver, not only the live tensors the trace counts. The terms
are `tensors` (the traced peak), `context`, `allocatorReserve`, `unshardedGradients` and
`communication`; each is modelled from what causes it, and its size is fitted on ado's fleet sample A
(`bench/fleet.py fit`; docs/benchmarks.md, "ado's fleet"). The verdict leaves the reserve and the
unsharded gradients out; the device-level percent shown is the sum of every term, at most 100.

Design notes: docs/design-notes.md, "ftbench/predict/device_memory.py".
"""

from __future__ import annotations

from ftbench.api.prediction_report import DeviceMemory, DeviceTerm
from ftbench.api.profile import GpuMemory
from ftbench.api.rules.bounds import quantity_bytes
from ftbench.contracts.prediction import MemoryPrediction
from ftbench.predict.constants import FITTED_DEVICE, GIB, DeviceConstants


def communication_bytes(world_size: int, nodes: int, constants: DeviceConstants = FITTED_DEVICE) -> int:
    if world_size < 2:
        return 0
    return int((constants.several_ranks + (constants.several_nodes if nodes > 1 else 0)) * GIB)


def _reserve_causes(
    prediction: MemoryPrediction, constants: DeviceConstants = FITTED_DEVICE
) -> dict[str, tuple[bool, float]]:
    """Each cause of the allocator's reserve: (whether it applies, its fraction of the activations), keyed by the
    name the fleet fit gives its feature."""
    return {
        "reserve_of_activations": (True, constants.reserve_of_activations),
        "reserve_of_routed_activations": (prediction.expert_shapes_vary, constants.reserve_of_routed_activations),
        "reserve_of_dispatched_activations": (
            prediction.expert_parallel > 1,
            constants.reserve_of_dispatched_activations,
        ),
    }


def reserve_fraction(prediction: MemoryPrediction, constants: DeviceConstants = FITTED_DEVICE) -> float:
    """The allocator's reserve per byte of forward's and backward's largest non-state hold."""
    return sum(fraction for applies, fraction in _reserve_causes(prediction, constants).values() if applies)


def device_memory(
    prediction: MemoryPrediction, gpu: GpuMemory, constants: DeviceConstants = FITTED_DEVICE, context_offset: int = 0
) -> DeviceMemory:
    """The device-level peak of a prediction on one GPU model, with the fleet's constants or another fit's;
    `context_offset`: what a cluster's calibration adds to the context (ftbench.predict.calibrate, may be negative)."""
    capacity = int(quantity_bytes(gpu.capacity))
    inside = prediction.unsharded_gradient_bytes if prediction.unsharded_gradients_in_peak else 0
    terms = {
        "tensors": prediction.peak_bytes - inside,
        "context": max(0, int(quantity_bytes(gpu.runtime_overhead)) + context_offset),
        "allocatorReserve": int(reserve_fraction(prediction, constants) * prediction.activations_peak_bytes),
        "unshardedGradients": prediction.unsharded_gradient_bytes,
        "communication": communication_bytes(prediction.world_size, prediction.nodes, constants),
    }
    total = sum(terms.values())
    required = total - terms["allocatorReserve"] - terms["unshardedGradients"]
    return DeviceMemory(
        terms=[DeviceTerm(name=k, bytes=v) for k, v in terms.items()],
        total_bytes=total,
        capacity_bytes=capacity,
        percent=round(min(100.0, 100.0 * total / capacity), 1) if capacity else 0.0,
        required_bytes=required,
        fits=required <= capacity,
    )


def device_features(prediction: MemoryPrediction) -> dict[str, float]:
    """The causes of the fitted terms, in GiB or as indicators (bench/fleet.py fits their sizes; the context is the
    profile's)."""
    activations = prediction.activations_peak_bytes / GIB
    return {
        **{name: activations if applies else 0.0 for name, (applies, _) in _reserve_causes(prediction).items()},
        "several_ranks": 1.0 if prediction.world_size > 1 else 0.0,
        "several_nodes": 1.0 if prediction.nodes > 1 else 0.0,
    }
