"""The network preflight's result: the collective bandwidth self-test and the transport in effect.

Part of a result's environment (`RunEnvironment.network`): the trainer writes it, `ftbench run`,
the operator and the report read it (docs/roce.md says how it is measured).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from ftbench.contracts.bounded import BoundedName, BoundedReason
from ftbench.contracts.numbers import Count, NonNegative
from ftbench.contracts.wire import WireModel

# Message sizes and devices a network result keeps (the termination message holds 4 KiB in all).
BANDWIDTH_SAMPLE_LIMIT = 16
NETWORK_DEVICE_LIMIT = 16


class Collective(StrEnum):
    """The collectives the network preflight times (nccl-tests' all_reduce_perf and all_gather_perf)."""

    ALL_REDUCE = "allReduce"
    ALL_GATHER = "allGather"


class NetworkTransport(StrEnum):
    """The network the collectives used between nodes, as the backend reported it."""

    IB = "ib"  # NCCL's IB verbs transport: InfiniBand or RoCE (linkLayer says which), RDMA
    SOCKET = "socket"  # NCCL's TCP socket transport (no RDMA)
    TCP = "tcp"  # gloo (CPU ranks): always TCP
    UNKNOWN = "unknown"  # NCCL printed no "Using network" line (its debug log was not readable)


class BandwidthSample(WireModel):
    """One collective at one message size, timed as nccl-tests time it (docs/roce.md)."""

    collective: Collective = Field(description="allReduce or allGather.")
    size_bytes: Annotated[int, Field(ge=1)] = Field(
        description="S of nccl-tests: the per-rank buffer of allReduce, the total (gathered) size of allGather."
    )
    seconds: NonNegative = Field(
        description="Mean time of one timed iteration (after the warm-up ones), the slowest rank's."
    )
    alg_bandwidth_gbps: NonNegative = Field(description="algbw: sizeBytes / seconds, in GB/s (1e9 bytes/s).")
    bus_bandwidth_gbps: NonNegative = Field(
        description="busbw: algbw x 2(n-1)/n for allReduce, x (n-1)/n for allGather (n ranks), in GB/s: "
        "comparable with the links' peak bandwidth whatever n is."
    )


class NetworkInEffect(WireModel):
    """The collective bandwidth self-test run before training, and the transport the backend really used."""

    backend: BoundedReason = Field(description="torch.distributed backend: nccl (GPUs) or gloo (CPU ranks).")
    transport: NetworkTransport = Field(
        description="ib (NCCL over IB verbs: InfiniBand or RoCE), socket (NCCL over TCP sockets), tcp (gloo), "
        "or unknown (NCCL's log said nothing)."
    )
    link_layer: BoundedReason = Field(
        "", description="RoCE or IB for transport ib, read from NCCL's NET/IB device list; empty otherwise."
    )
    rdma: bool = Field(False, description="True when NCCL moved data between nodes with RDMA (transport ib).")
    gpu_direct_rdma: bool = Field(
        False, description="True when NCCL reported a GPUDirect RDMA path (via NET/IB/.../GDRDMA)."
    )
    devices: Annotated[list[BoundedReason], Field(max_length=NETWORK_DEVICE_LIMIT)] = Field(
        default_factory=list,
        description="What the transport used: HCA ports (mlx5_0:1/RoCE) for ib, interfaces (eth0) for sockets.",
    )
    fallback: BoundedName = Field(
        "", description="NCCL's warning when it fell back to sockets (e.g. 'NET/IB : No device found.'); empty if none."
    )
    nccl_version: BoundedName = Field("", description="NCCL's version as it printed it; empty for gloo.")
    ranks: Annotated[int, Field(ge=1)] = Field(description="Ranks that took part (n in the busbw factors).")
    warmup_iterations: Count = Field(description="Untimed iterations before each size.")
    iterations: Count = Field(description="Most timed iterations per size (fewer where the time budget required it).")
    seconds: NonNegative = Field(description="Wall-clock time of the whole self-test.")
    bandwidth: Annotated[list[BandwidthSample], Field(max_length=BANDWIDTH_SAMPLE_LIMIT)] = Field(
        default_factory=list, description="algbw and busbw per collective and message size, small to large."
    )
    peak_bus_bandwidth_gbps: NonNegative = Field(
        0.0, description="The largest busBandwidthGbps of any collective and size, in GB/s."
    )
