"""Stopping a child process and everything it started, escalating signals.

The children (control-plane servers, accelerate and its ranks, the kubelet) run in process
groups of their own, so one `killpg` reaches the whole tree, and a caller's Ctrl-C never does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

TERM_THEN_KILL: tuple[tuple[signal.Signals, float], ...] = ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0))


def stop_process_group(proc: subprocess.Popen, steps: Sequence[tuple[signal.Signals, float]] = TERM_THEN_KILL) -> None:
    """Send each (signal, seconds to wait) step to `proc`'s group until the leader has exited."""
    for sig, wait in steps:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
