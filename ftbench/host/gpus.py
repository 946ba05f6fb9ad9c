"""How many GPUs there are: the machine's (a node's capacity) and this process's (a local run).

One place for both counts, so the local kubelet's ``nvidia.com/gpu`` capacity and ``ftbench
run``'s check of ``numberGpus`` ask the hardware the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess


def machine_gpu_count() -> int:
    """GPUs on this machine: NVML if installed, else ``nvidia-smi -L``, else 0.

    ``CUDA_VISIBLE_DEVICES`` is not consulted: this is what a node advertises, not what one
    process may use.
    """
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    if smi := shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
            return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def local_gpu_count() -> int:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else the machine's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return machine_gpu_count()
