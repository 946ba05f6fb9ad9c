"""The few collectives the measurement needs, as no-ops when training runs in one process.

Used sparingly on purpose: one tiny all-reduce per step only when a clock-based stop is active
(so all ranks stop on the same step), and one all_gather_object at the end of training.
"""

from __future__ import annotations

import os
from typing import Any


def _dist() -> Any | None:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is always there in a trainer image
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def rank() -> int:
    d = _dist()
    return d.get_rank() if d else int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    d = _dist()
    return d.get_world_size() if d else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def local_world_size() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size())) or 1)


def _device() -> Any:
    import torch

    d = _dist()
    if d is not None and d.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_true(flags: tuple[bool, ...]) -> tuple[bool, ...]:
    """Element-wise OR of boolean flags over ranks (all-reduce MAX)."""
    d = _dist()
    if d is None:
        return flags
    import torch

    t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=_device())
    d.all_reduce(t, op=d.ReduceOp.MAX)
    return tuple(bool(v) for v in t.tolist())


def gather(obj: Any) -> list[Any]:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    d = _dist()
    if d is None:
        return [obj]
    out: list[Any] = [None] * d.get_world_size()
    d.all_gather_object(out, obj)
    return out
