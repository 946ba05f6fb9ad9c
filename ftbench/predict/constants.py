"""Every constant the prediction was fitted to, stated once with where it came from.

The device-level memory terms (`bench/fleet.py fit`), the throughput model (`bench/fleet_throughput.py fit`),
the out-of-sample error bands and the calibration domain (`tabulate --write-docs` of both, between the
generated markers below), all on ado's fleet sample A (../shared/data/ado-fleet/fleet-sample-A.csv, docs/
benchmarks.md "ado's fleet"). The `context` term's default is also the profile's gpuMemory runtimeOverhead
default, which the API states (it cannot import this package): tests/unit/test_device_reserve.py holds the two
equal. tests/trainer/test_fleet.py and tests/unit/test_throughput.py hold the rest to their fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

GIB: Final = 2**30

# -- device-level memory (ftbench.predict.device_memory) ------------------------------------------------------
# Fitted on ado's fleet sample A (bench/fleet.py fit, least absolute deviations): the reserve as a fraction of
# forward's and backward's largest non-state bytes (more where MoE experts' shapes vary, more again where fastMoe
# dispatches tokens across ranks), NCCL's buffers on several ranks of one node, and the extra when ranks span nodes.
RESERVE_FRACTION: Final = 0.25
ROUTED_RESERVE_FRACTION: Final = 0.18  # added to RESERVE_FRACTION where expert shapes vary from step to step
DISPATCHED_RESERVE_FRACTION: Final = 0.2  # added again where fastMoe dispatches tokens across expert-parallel ranks
COMMUNICATION_BYTES: Final = int(1.9 * GIB)
INTER_NODE_BYTES: Final = int(4.2 * GIB)
# The `context` term: the CUDA context, its libraries' workspaces and the allocator's first segments beyond the
# tensors (bench/fleet.py fit: 1.68 GiB on the fleet's A100 runs), as a profile's gpuMemory runtimeOverhead.
RUNTIME_OVERHEAD: Final = "1720Mi"


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


# -- throughput (ftbench.predict.throughput) ---------------------------------------------------------------
LayerCost = Literal["one_gpu_full", "one_gpu_peft", "sharded_full", "sharded_peft"]

SATURATION_TOKENS: Final = 8192  # stated: tokens per device per micro-step where `long` starts
EFFICIENCY_CAP: Final = 0.9  # no row of the fleet ran above 85 % (hardware FLOPs)


@dataclass(frozen=True)
class ThroughputConstants:
    """The model's free constants (one value each; `bench/fleet_throughput.py fit` varies them)."""

    efficiency: Mapping[str, float]  # coefficients of log efficiency (efficiency_features' keys)
    layer_seconds: Mapping[LayerCost, float]  # per layer per micro-step: 1 GPU or sharded, full or PEFT
    expert_seconds: float  # per routed expert per layer per micro-step, without fast MoE kernels
    expert_token_seconds: float  # the same per token of the micro-step
    expert_full_factor: float  # how much dearer the expert loop is when the experts train
    # per MoE layer per micro-step where fastMoe dispatches tokens across ranks (expert parallel > 1): the
    # all-to-all waits for the token counts on the host (`.cpu().tolist()`), so the GPU idles every layer
    expert_parallel_seconds: float
    rdma_bytes: float  # inter-node bytes/s per GPU for FSDP's collectives over RoCE/InfiniBand
    tcp_bytes: float  # the same over TCP sockets
    # The efficiency of a GPU family against the fleet's A100s (1 where ftbench has no figures of its own)
    gpu_efficiency: Mapping[str, float] = field(default_factory=dict)


# Fitted by `bench/fleet_throughput.py fit` on ../shared/data/ado-fleet/fleet-sample-A.csv (every clean row that
# ran); tests/unit/test_throughput.py holds these to the fit, docs/benchmarks.md has its error per group.
FITTED: Final = ThroughputConstants(
    efficiency={
        "dense": -0.37,  # log efficiency at 8192 tokens per device per micro-step, PEFT, no fast kernels
        "moe": -0.432,
        "hybrid": -0.048,
        "long": -0.083,  # slope in log(tokens per micro-step / 8192) above 8192 (attention's share grows)
        "fast_kernels": 0.223,
        "fast_moe": -0.763,
        "full": 0.036,
    },
    layer_seconds={"one_gpu_full": 7.1e-3, "one_gpu_peft": 7.5e-3, "sharded_full": 10e-3, "sharded_peft": 21e-3},
    expert_seconds=2.6e-4,
    expert_token_seconds=2e-8,
    expert_full_factor=2.3,
    expert_parallel_seconds=9.2e-3,
    rdma_bytes=61e9,
    tcp_bytes=7.2e9,
    # ftbench's own runs on lent GPUs (bench/fleet_throughput.py own: llama-7b at 8 x 2048 on one GPU)
    gpu_efficiency={"H100": 0.839, "H200": 0.899},
)


# -- how sure: the fleet's out-of-sample bands (ftbench.predict.fleet_accuracy) ---------------------------
# Stated, not fitted: the fewest rows a group's band rests on, and the widening outside the calibration.
MIN_ROWS: Final = 10
OUTSIDE_FACTOR: Final = 2.0
Band = tuple[int, float, float]  # rows that ran, median, 90th percentile of |error|

# Device-level memory: |predicted - measured NVML peak| in percentage points of the card.
# memory-accuracy:start (generated by bench/fleet.py tabulate --write-docs)
MEMORY_BANDS: Final[dict[tuple[str, str], tuple[int, float, float]]] = {
    ("one GPU", "dense"): (24, 0.6, 4.3),
    ("one GPU", "MoE/hybrid"): (13, 5.3, 17.3),
    ("one GPU", "any"): (37, 2.4, 9.1),
    ("several GPUs on one node", "dense"): (75, 1.6, 5.1),
    ("several GPUs on one node", "MoE/hybrid"): (75, 2.4, 10.7),
    ("several GPUs on one node", "any"): (150, 1.8, 7.9),
    ("several nodes", "dense"): (22, 7.8, 27.7),
    ("several nodes", "MoE/hybrid"): (6, 7.3, 16.4),
    ("several nodes", "any"): (28, 7.8, 27.7),
}
MEMORY_UNSEEN_MODEL_BANDS: Final[dict[tuple[str, str], tuple[int, float, float]]] = {
    ("one GPU", "any"): (37, 2.4, 12.0),
    ("several GPUs on one node", "any"): (150, 2.5, 9.9),
    ("several nodes", "any"): (28, 8.8, 30.2),
}
# memory-accuracy:end

# Throughput: |predicted - measured| / measured steady tokens/s, in percent.
# throughput-accuracy:start (generated by bench/fleet_throughput.py tabulate --write-docs)
THROUGHPUT_BANDS: Final[dict[tuple[str, str], tuple[int, float, float]]] = {
    ("one GPU", "dense"): (24, 4.8, 17.6),
    ("one GPU", "MoE/hybrid"): (13, 10.4, 68.1),
    ("one GPU", "any"): (37, 6.3, 41.3),
    ("several GPUs on one node", "dense"): (75, 6.5, 18.1),
    ("several GPUs on one node", "MoE/hybrid"): (75, 14.3, 30.7),
    ("several GPUs on one node", "any"): (150, 9.4, 23.6),
    ("several nodes", "dense"): (22, 19.6, 85.2),
    ("several nodes", "MoE/hybrid"): (6, 19.7, 245.2),
    ("several nodes", "any"): (28, 19.6, 88.7),
}
THROUGHPUT_UNSEEN_MODEL_BANDS: Final[dict[tuple[str, str], tuple[int, float, float]]] = {
    ("one GPU", "any"): (37, 12.7, 182.6),
    ("several GPUs on one node", "any"): (150, 15.0, 71.3),
    ("several nodes", "any"): (28, 13.9, 90.2),
}
# throughput-accuracy:end

# What calibrated the fit: the fleet's rows that ran.
# calibration-domain:start (generated by bench/fleet.py tabulate --write-docs)
FLEET_MODELS: Final = (
    "granite-3.1-2b",
    "granite-3.1-3b-a800m-instruct",
    "granite-3.1-8b-instruct",
    "granite-3.3-8b",
    "granite-4.0-h-tiny",
    "llama3.1-70b",
    "llama3.1-8b",
    "llama3.2-1b",
    "llama3.2-3b",
    "mistral-7b-v0.1",
    "mixtral-8x7b-instruct-v0.1",
)
FLEET_GPU_FAMILIES: Final = ("A100",)
FLEET_ARCHITECTURES: Final = (
    "granite (dense)",
    "granitemoe (MoE/hybrid)",
    "granitemoehybrid (MoE/hybrid)",
    "llama (dense)",
    "mistral (dense)",
    "mixtral (MoE/hybrid)",
)
FLEET_RELEASES: Final = (
    "fms-hf-tuning 2.4.0",
    "fms-hf-tuning 2.7.1",
    "fms-hf-tuning 2.8.2",
    "fms-hf-tuning 3.0.0",
    "fms-hf-tuning 3.1.0",
)
FLEET_MAX_GPUS: Final = 32
FLEET_MAX_NODES: Final = 4
FLEET_SEQUENCE: Final = (512, 8192)
# calibration-domain:end
