"""How many GPUs there are: the machine's (a node's capacity) and this process's (a local run).

One place for both counts, so the local kubelet's ``nvidia.com/gpu`` capacity and ``ftbench
run``'s check of ``numberGpus`` ask the hardware the same way.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

log = logging.getLogger(__name__)


def machine_gpu_count() -> int:
    """GPUs on this machine: NVML if installed, else ``nvidia-smi -L``, else 0.

    ``CUDA_VISIBLE_DEVICES`` is not consulted: this is what a node advertises, not what one
    process may use.
    """
    try:
        import pynvml
    except ImportError:  # no NVML bindings here: ask nvidia-smi
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                return int(pynvml.nvmlDeviceGetCount())
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:  # no driver, no device: what a CPU machine says
            log.info("NVML counts no GPUs (%s); asking nvidia-smi", exc)
    if smi := shutil.which("nvidia-smi"):
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("nvidia-smi -L failed (%s): counting 0 GPUs", exc)
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def local_gpu_count() -> int:
    """GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else the machine's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return machine_gpu_count()
