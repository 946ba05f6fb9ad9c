"""FSDP on CPU ranks: accelerate's own FSDP path, switched on where accelerate leaves it off.

accelerate (0.33 to 1.15, every version the engines pin) drops the FSDP plugin on CPU ranks
(MULTI_CPU, gloo), so an "FSDP" run on CPU silently trains as DDP. `enable` wraps
`AcceleratorState.__init__` and does what its GPU branch does, so the CPU and GPU paths differ only
in device and backend (docs/measurements.md, "FSDP on CPU ranks"). This touches accelerate's private
state, so the trainer checks after wrapping that the model really is FSDP (`measure.shards`) and
refuses to report an FSDP run that is not.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/cpu_fsdp.py".
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

_MARK = "_ftbench_cpu_fsdp"


def enable() -> bool:
    """Install the switch (idempotent). Call before TrainingArguments / Trainer are built.

    Returns False (and changes nothing) when accelerate is not there or the launcher did not ask
    for FSDP (`ACCELERATE_USE_FSDP`, set by `accelerate launch` from an FSDP config)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return False
    try:
        from accelerate.state import AcceleratorState
    except ImportError:  # pragma: no cover - accelerate is in every trainer environment
        return False
    original = AcceleratorState.__init__
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _switch_to_fsdp(self, kwargs.get("fsdp_plugin"))

    setattr(__init__, _MARK, True)
    AcceleratorState.__init__ = __init__
    _fsdp1_without_cpu_device_id()
    return True


def _fsdp1_without_cpu_device_id() -> None:
    """FSDP1 given `device_id=cpu:N` (older accelerate passes the rank's device) compares it with
    its compute device `cpu` and raises "Inconsistent compute device and `device_id`"; a CPU has no
    index (and without a `device_id` FSDP1 looks for an accelerator), so on CPU ranks it gets plain `cpu`."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    original = FullyShardedDataParallel.__init__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        device_id = kwargs.get("device_id")
        if device_id is not None and getattr(device_id, "type", str(device_id).split(":")[0]) == "cpu":
            import torch

            kwargs["device_id"] = torch.device("cpu")
        original(self, *args, **kwargs)

    setattr(__init__, _MARK, True)
    FullyShardedDataParallel.__init__ = __init__  # type: ignore[method-assign]


def _switch_to_fsdp(state: Any, plugin: Any) -> None:
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if plugin is None or state.distributed_type != DistributedType.MULTI_CPU:
        return
    mixed_precision = getattr(state, "_mixed_precision", "no")
    if mixed_precision != "no":
        plugin.set_mixed_precision(mixed_precision)
    _unpinned_offload(plugin)
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    log.info("FSDP on CPU ranks: accelerate state switched from MULTI_CPU to FSDP (version %s)", fsdp_version(plugin))


def fsdp_version(plugin: Any) -> int:
    """The plugin's FSDP version (accelerate before 1.6 has only FSDP1 and no attribute)."""
    return int(getattr(plugin, "fsdp_version", 1) or 1)


def _unpinned_offload(plugin: Any) -> None:
    """FSDP2 offload on CPU: the same CPUOffloadPolicy without pinned memory (see the module doc)."""
    if fsdp_version(plugin) != 2:
        return
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy
    except ImportError:  # pragma: no cover - torch >= 2.6 has it wherever FSDP2 exists
        return
    if isinstance(plugin.cpu_offload, CPUOffloadPolicy) and plugin.cpu_offload.pin_memory:
        plugin.cpu_offload = CPUOffloadPolicy(pin_memory=False)
