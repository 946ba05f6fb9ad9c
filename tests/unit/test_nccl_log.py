"""NCCL's own init lines tell the transport in effect: anonymised public logs (tests/unit/nccl_logs/README.md
names each source) read by `ftbench_trainer.network.nccl_log`, the socket fallback included."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftbench.contracts.network import NetworkTransport
from ftbench_trainer.network.nccl_log import NcclNetwork, network_lines, parse_nccl_log

LOGS = Path(__file__).parent / "nccl_logs"


def read(name: str) -> NcclNetwork:
    return parse_nccl_log((LOGS / name).read_text().splitlines())


def test_roce_with_gpudirect_rdma() -> None:
    # NVIDIA/nccl-tests#185: two RoCE ports per node, "Using network IB"; channels via NET/IB/N/GDRDMA.
    net = read("roce-gdr.log")
    assert net.transport == NetworkTransport.IB and net.link_layer == "RoCE"
    assert net.devices == ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE")  # the [RO] flag is not a port
    assert net.gpu_direct_rdma and net.gdr_channels == 4
    assert net.version == "2.19.3+cuda12.3" and not net.fallback


def test_infiniband_without_gpudirect() -> None:
    # Mellanox/nv_peer_memory#56: IB link layer, channels via NET/IB/0 with no GDRDMA.
    net = read("ib-no-gdr.log")
    assert net.transport == NetworkTransport.IB and net.link_layer == "IB"
    assert net.devices == ("mlx5_0:1/IB",)
    assert not net.gpu_direct_rdma and net.plain_channels == 2
    assert net.version == "2.5.6+cuda10.0"


def test_sharp_plugin_is_ib() -> None:
    # NVIDIA/nccl#988: "Using network IBext", ports mlx5_0:1/IB/SHARP.
    net = read("ib-sharp.log")
    assert net.transport == NetworkTransport.IB and net.link_layer == "IB"
    assert not net.gpu_direct_rdma  # no channel line: not claimed


def test_sockets_forced() -> None:
    # NVIDIA/nccl#676: NCCL_NET=Socket; the interfaces are the devices.
    net = read("socket-forced.log")
    assert net.transport == NetworkTransport.SOCKET
    assert net.devices == ("enp225s0f1",) and net.link_layer == "" and not net.gpu_direct_rdma
    assert net.version == "2.11.4+cuda11.4"


def test_roce_not_found_falls_back_to_sockets() -> None:
    # NVIDIA/nccl#958 and #952: "NET/IB : No device found." (WARN in newer releases, INFO in older) -> sockets.
    net = read("roce-not-found.log")
    assert net.transport == NetworkTransport.SOCKET
    assert net.fallback == "NET/IB : No device found."
    assert net.devices == ("eth0", "net1")
    assert net.plain_channels == 2


def test_one_rank_on_sockets_decides() -> None:
    """Logs of several ranks read together: one rank on sockets makes the run a socket run."""
    lines = [*(LOGS / "roce-gdr.log").read_text().splitlines(), *(LOGS / "roce-not-found.log").read_text().splitlines()]
    net = parse_nccl_log(lines)
    assert net.transport == NetworkTransport.SOCKET and net.fallback
    assert not net.gpu_direct_rdma  # socket channels beside the GDRDMA ones


@pytest.mark.parametrize("lines", [[], ["no NCCL here"], ["host:1:1 [0] NCCL INFO Using network AWS Libfabric"]])
def test_nothing_said_is_unknown(lines: list[str]) -> None:
    assert parse_nccl_log(lines).transport == NetworkTransport.UNKNOWN


def test_the_lines_echoed_to_the_pod_log() -> None:
    lines = (LOGS / "roce-not-found.log").read_text().splitlines()
    echoed = network_lines(lines)
    assert any("NCCL WARN NET/IB : No device found." in line for line in echoed)
    assert any("NCCL_IB_DISABLE set by environment to 0." in line for line in echoed)
    assert any("Using network Socket" in line for line in echoed)
    assert not any("Bootstrap" in line or "NET/Plugin" in line for line in echoed)
    assert parse_nccl_log(echoed) == parse_nccl_log(lines)  # what the log shows decides the same
