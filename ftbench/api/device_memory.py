"""Device memory as the GPU counts it: the traced tensor peak plus what a training process holds beside it.

NVML (nvidia-smi, ado's `gpu_memory_utilization_peak`, ftbench's `gpuMemoryUtilizationPeakPercent`)
counts every byte a process has from the driver, not only the live tensors the trace counts. The terms
are `tensors` (the traced peak), `context`, `allocatorReserve`, `unshardedGradients` and
`communication`; each is modelled from what causes it, and its size is fitted on ado's fleet sample A
(`bench/fleet.py fit`; docs/benchmarks.md, "ado's fleet"). The verdict leaves the reserve and the
unsharded gradients out; the device-level percent shown is the sum of every term, at most 100.

Design notes: docs/design-notes.md, "ftbench/api/device_memory.py".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.profile import GpuMemory
from ftbench.api.rules_bounds import quantity_bytes
from ftbench.contracts.prediction import MemoryPrediction

GIB: Final = 2**30
# Fitted on ado's fleet sample A (bench/fleet.py fit, least absolute deviations): the reserve as a fraction of
# forward's and backward's largest non-state bytes (more where MoE experts' shapes vary, more again where fastMoe
# dispatches tokens across ranks), NCCL's buffers on several ranks of one node, and the extra when ranks span nodes.
RESERVE_FRACTION: Final = 0.25
ROUTED_RESERVE_FRACTION: Final = 0.18  # added to RESERVE_FRACTION where expert shapes vary from step to step
DISPATCHED_RESERVE_FRACTION: Final = 0.2  # added again where fastMoe dispatches tokens across expert-parallel ranks
COMMUNICATION_BYTES: Final = int(1.9 * GIB)
INTER_NODE_BYTES: Final = int(4.2 * GIB)


@dataclass(frozen=True)
class DeviceConstants:
    """The fitted sizes of the device-level terms: one set per fit (the fleet's, a fold's, a cluster's calibration)."""

    reserve_of_activations: float = RESERVE_FRACTION
    reserve_of_routed_activations: float = ROUTED_RESERVE_FRACTION
    reserve_of_dispatched_activations: float = DISPATCHED_RESERVE_FRACTION
    several_ranks: float = COMMUNICATION_BYTES / GIB  # GiB
    several_nodes: float = INTER_NODE_BYTES / GIB  # GiB

    def with_reserve_scale(self, scale: float) -> DeviceConstants:
        """Every cause of the allocator's reserve times `scale` (a calibration's per-model correction)."""
        return DeviceConstants(
            reserve_of_activations=self.reserve_of_activations * scale,
            reserve_of_routed_activations=self.reserve_of_routed_activations * scale,
            reserve_of_dispatched_activations=self.reserve_of_dispatched_activations * scale,
            several_ranks=self.several_ranks,
            several_nodes=self.several_nodes,
        )

    @classmethod
    def of_fit(cls, coefficients: dict[str, float]) -> DeviceConstants:
        """From a fit's coefficients, keyed as `device_features` names the causes."""
        return cls(**coefficients)


FITTED_DEVICE: Final = DeviceConstants()

Bytes = Annotated[int, Field(ge=0)]


class DeviceTerm(ApiModel):
    name: str = Field(description="tensors, context, allocatorReserve, unshardedGradients or communication.")
    bytes: Bytes = Field(description="What the term adds to the device's peak.")


class DeviceMemory(ApiModel):
    """One device's predicted peak as NVML counts it, term by term (docs/measurements.md)."""

    terms: list[DeviceTerm] = Field(description="Each term of the device-level peak, largest cause first.")
    total_bytes: Bytes = Field(description="The sum of the terms: the predicted NVML peak.")
    capacity_bytes: Bytes = Field(description="The GPU model's memory (profile gpuMemory).")
    percent: Annotated[float, Field(ge=0, le=100)] = Field(
        description="The predicted NVML peak as a percentage of the capacity (at most 100: the allocator gives back "
        "its cache before it fails)."
    )
    required_bytes: Bytes = Field(
        description="What must fit for the run not to fail: every term but the reserve and the unsharded gradients."
    )
    fits: bool = Field(description="required_bytes is at most the capacity.")

    @property
    def tensor_bytes(self) -> int:
        return self.term("tensors")

    @property
    def dominant(self) -> str:
        return max(self.terms, key=lambda t: t.bytes).name

    def term(self, name: str) -> int:
        return next((t.bytes for t in self.terms if t.name == name), 0)


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
    `context_offset`: what a cluster's calibration adds to the context (ftbench.api.calibrate, may be negative)."""
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
