"""Child processes: whether one is alive, and stopping it with everything it started.

The children (control-plane servers, accelerate and its ranks, the kubelet) run in process
groups of their own, so one `killpg` reaches the whole tree, and a caller's Ctrl-C never does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

TERM_THEN_KILL: tuple[tuple[signal.Signals, float], ...] = ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0))


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (an exited child nobody has waited for yet).

    Read from ``/proc`` rather than ``kill(pid, 0)``, which reports zombies as alive.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_process_group(proc: subprocess.Popen, steps: Sequence[tuple[signal.Signals, float]] = TERM_THEN_KILL) -> None:
    """Send each (signal, seconds to wait) step to `proc`'s group until the leader has exited."""
    for sig, wait in steps:
        if proc.poll() is not None:
            return
        signal_group(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
