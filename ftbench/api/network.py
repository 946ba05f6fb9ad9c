"""What the network preflight's figures mean: the verdicts the operator's status and the trainer share.

Pure functions of the trainer's `NetworkInEffect` (status.environment.network), the spec and the
cluster profile. Each returns None when all is well, else the problem in words (docs/roce.md,
"Reading the network preflight").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ftbench.contracts.network import NetworkInEffect, NetworkTransport
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.results import Outcome

# A peak bus bandwidth below this fraction of the profile's expectedBusBandwidthGbps is "far below".
BANDWIDTH_FLOOR = 0.5


def roce_problem(network: NetworkInEffect) -> str | None:
    """Why NCCL did not run on RoCE between the nodes, or None when it did (IB verbs, link layer RoCE)."""
    if network.transport == NetworkTransport.IB and network.link_layer == "RoCE":
        return None
    if network.transport == NetworkTransport.IB:
        return (
            f"NCCL used IB verbs but over link layer {network.link_layer or 'unknown'} "
            f"({', '.join(network.devices) or 'no device listed'}), not RoCE"
        )
    if network.transport == NetworkTransport.SOCKET:
        fallback = f" after '{network.fallback}'" if network.fallback else ""
        devices = f" on {', '.join(network.devices)}" if network.devices else ""
        return f"NCCL fell back to TCP sockets{devices}{fallback}: no RDMA between the nodes"
    if network.transport == NetworkTransport.TCP:
        return f"backend {network.backend} moves data over TCP: RoCE needs NCCL on GPUs"
    return "NCCL's log did not say which network it used (NCCL_DEBUG_FILE not readable?)"


def bandwidth_problem(network: NetworkInEffect, expected_gbps: float | None) -> str | None:
    """Why the peak bus bandwidth is far below what the cluster profile expects, or None."""
    if not expected_gbps or not network.bandwidth:
        return None
    peak = network.peak_bus_bandwidth_gbps
    if peak >= BANDWIDTH_FLOOR * expected_gbps:
        return None
    return (
        f"peak bus bandwidth {peak:g} GB/s is {peak / expected_gbps:.0%} of the {expected_gbps:g} GB/s the cluster "
        f"profile expects (expectedBusBandwidthGbps; below {BANDWIDTH_FLOOR:.0%} is flagged)"
    )


@dataclass(frozen=True)
class NetworkExpectation:
    """What a run's network should show: RoCE (a multi-node enableRoce run) and the profile's busbw."""

    roce: bool = False
    bus_bandwidth_gbps: float | None = None


SOCKET_TRANSPORT = "SocketTransport"
# The same reason as run.requireRoce's outcome: one spelling (ftbench.contracts.outcomes).
ROCE_NOT_IN_EFFECT = OUTCOMES[Outcome.NETWORK_UNFIT].status_reason
LOW_BUS_BANDWIDTH = "LowBusBandwidth"
AS_EXPECTED = "AsExpected"


@dataclass(frozen=True)
class NetworkVerdict:
    """Condition NetworkAsExpected: True (reason AsExpected) or False with the first problem's reason."""

    ok: bool
    reason: str
    message: str

    @property
    def status(self) -> str:
        """The condition's status ("True" or "False")."""
        return str(self.ok)


def network_verdict(network: NetworkInEffect, expect: NetworkExpectation) -> NetworkVerdict:
    """The preflight's figures against what the spec and the profile expect (docs/roce.md)."""
    problems: list[tuple[str, str]] = []
    if expect.roce and (roce := roce_problem(network)):
        reason = SOCKET_TRANSPORT if network.transport == NetworkTransport.SOCKET else ROCE_NOT_IN_EFFECT
        problems.append((reason, f"enableRoce: {roce}"))
    if low := bandwidth_problem(network, expect.bus_bandwidth_gbps):
        problems.append((LOW_BUS_BANDWIDTH, low))
    if problems:
        return NetworkVerdict(False, problems[0][0], "; ".join(message for _, message in problems))
    return NetworkVerdict(True, AS_EXPECTED, describe(network))


def status_network(status: Mapping[str, Any]) -> NetworkInEffect | None:
    """An experiment's network preflight, `status.environment.network`, whatever its phase; None without one."""
    network = (status.get("environment") or {}).get("network")
    return NetworkInEffect.model_validate(network) if network else None


def transport_text(network: NetworkInEffect) -> str:
    """The transport with its link layer: 'ib (RoCE)', 'socket', 'tcp'."""
    return network.transport.value + (f" ({network.link_layer})" if network.link_layer else "")


def describe(network: NetworkInEffect) -> str:
    """One line: backend, transport, devices, peak busbw (the trainer's log and the condition say it so)."""
    transport = transport_text(network)
    gdr = ", GPUDirect RDMA" if network.gpu_direct_rdma else ""
    devices = f" on {','.join(network.devices)}" if network.devices else ""
    fallback = f"; {network.fallback}" if network.fallback else ""
    return (
        f"{network.backend} over {transport}{gdr}{devices}, {network.ranks} ranks, peak busbw "
        f"{network.peak_bus_bandwidth_gbps:g} GB/s in {network.seconds:g} s{fallback}"
    )
