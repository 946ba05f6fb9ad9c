"""A free TCP port on this machine, for local multi-process runs.

`ftbench run` and `ftbench sweep` start their ranks' rendezvous on the port this picks instead of the
cluster profile's fixed one (29500), so two local runs side by side, or a run beside another
program's torch.distributed job, never collide. The OS picks the port; it is free when asked and
rendezvous binds it moments later (a port taken in between fails the run, which says so).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port no process listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
