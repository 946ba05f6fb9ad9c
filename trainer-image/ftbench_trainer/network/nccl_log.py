"""What NCCL's own debug lines say about the network it uses (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET).

Pure: lines in, a `NcclNetwork` out. The shapes it reads (NCCL 2.4 to 2.2x; lines prefixed
`host:pid:tid [localrank]`, several ranks interleaved):

- ``NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB eth0:10.0.0.1<0>``: the IB verbs
  transport's ports, each ``/RoCE`` (Ethernet link layer) or ``/IB`` (InfiniBand);
- ``NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>``: the socket transport's interfaces (printed
  even when IB then carries the data, so it decides nothing alone);
- ``NCCL INFO Using network IB`` / ``Using network Socket``: the network NCCL chose (``IBext``: the SHARP
  plugin over IB verbs; ports then read ``mlx5_0:1/IB/SHARP``);
- ``NET/IB : No device found.`` (INFO in old releases, WARN in newer ones): the silent fallback to sockets;
- ``Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA``: a channel over the network with
  GPUDirect RDMA (``via P2P/IPC`` or ``via SHM`` stay inside a node);
- ``NCCL version 2.19.3+cuda12.3``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ftbench.contracts.network import NetworkTransport

_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_IB = re.compile(r"NCCL INFO NET/IB : Using (.*?)(?:\s*;\s*OOB .*)?$")
_NET_SOCKET = re.compile(r"NCCL INFO NET/Socket : Using (.*)$")
_DEVICE = re.compile(r"\[\d+\]([^\s\[\]]+)")
_NO_DEVICE = re.compile(r"NCCL (?:INFO|WARN) (NET/IB ?: No device found\.?)")
_VIA_NET = re.compile(r"via NET/(\w+)/\d+(/GDRDMA)?")
_VERSION = re.compile(r"NCCL version (\S+)")


def _network(name: str) -> NetworkTransport:
    """NCCL's network name: IB, or a plugin built on it (IBext: SHARP), Socket; anything else unknown."""
    if name.startswith("IB"):
        return NetworkTransport.IB
    return NetworkTransport.SOCKET if name == "Socket" else NetworkTransport.UNKNOWN


@dataclass(frozen=True)
class NcclNetwork:
    """One process's (or several interleaved processes') reading of NCCL's network lines."""

    transport: NetworkTransport = NetworkTransport.UNKNOWN
    ib_ports: tuple[str, ...] = ()  # mlx5_10:1/RoCE
    socket_interfaces: tuple[str, ...] = ()  # eth0
    gdr_channels: int = 0  # network channels with GPUDirect RDMA
    plain_channels: int = 0  # network channels without it
    fallback: str = ""
    version: str = ""
    chosen: tuple[str, ...] = field(default=())  # every "Using network X" seen, in order

    @property
    def link_layer(self) -> str:
        """RoCE or IB when every IB port says so (a mix reads "RoCE+IB"); empty without IB ports."""
        layers = sorted({port.split("/")[1] for port in self.ib_ports if "/" in port})
        return "+".join(reversed(layers)) if layers else ""

    @property
    def gpu_direct_rdma(self) -> bool:
        """Every network channel NCCL reported went GPU <-> NIC directly (and there was one)."""
        return self.gdr_channels > 0 and self.plain_channels == 0

    @property
    def devices(self) -> tuple[str, ...]:
        """The ports or interfaces of the transport in effect."""
        return self.ib_ports if self.transport == NetworkTransport.IB else self.socket_interfaces


def network_lines(lines: Iterable[str]) -> list[str]:
    """The lines this module reads, plus NCCL's own warnings and NCCL_IB_* echoes: what a person checks in
    a pod's log (the trainer echoes them there, since the rest of NCCL's lines go to its debug file)."""
    readers = (_USING_NETWORK, _NET_IB, _NET_SOCKET, _NO_DEVICE, _VIA_NET, _VERSION)
    return [line for line in lines if "NCCL WARN" in line or "NCCL_IB_" in line or any(r.search(line) for r in readers)]


def _add(seen: tuple[str, ...], new: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*seen, *new]))


def parse_nccl_log(lines: Iterable[str]) -> NcclNetwork:
    """Read NCCL's network lines; a transport seen as Socket on any rank wins over IB (the worst link
    decides a ring's speed)."""
    net = NcclNetwork()
    ib: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    chosen: tuple[str, ...] = ()
    gdr = plain = 0
    fallback = version = ""
    for line in lines:
        if m := _USING_NETWORK.search(line):
            chosen += (m.group(1),)
        elif m := _NET_IB.search(line):
            ib = _add(ib, _DEVICE.findall(m.group(1)))
        elif m := _NET_SOCKET.search(line):
            sockets = _add(sockets, (d.split(":", 1)[0] for d in _DEVICE.findall(m.group(1))))
        elif m := _NO_DEVICE.search(line):
            fallback = fallback or m.group(1)
        elif m := _VIA_NET.search(line):
            gdr, plain = (gdr + 1, plain) if m.group(2) else (gdr, plain + 1)
        elif (m := _VERSION.search(line)) and not version:
            version = m.group(1)
    networks = {_network(name) for name in chosen}
    transport = net.transport
    for candidate in (NetworkTransport.SOCKET, NetworkTransport.UNKNOWN, NetworkTransport.IB):
        if candidate in networks:
            transport = candidate
            break
    return NcclNetwork(transport, ib, sockets, gdr, plain, fallback, version, chosen)
