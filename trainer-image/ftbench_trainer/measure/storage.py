"""Count live tensor storage during a training step, by phase and by what holds it.

A `TorchDispatchMode` sees every op's outputs; each new storage is counted once (by `measure.ledger`,
rounded up to the CUDA caching allocator's 512-byte blocks) and uncounted when Python frees it. This works
the same for fake tensors (the prediction) and real ones (measuring a real step with the same rule),
which is what makes the two comparable. A real FSDP2 step (DTensor shards, `UntypedStorage.resize_`)
and collectives' buffers freed late on real ranks (`settle`) are handled here too.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/measure/storage.py".
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ftbench_trainer.measure.ledger import Ledger

SETTLE_POLL_SECONDS = 0.005
SETTLED_AFTER = 5  # polls in a row without a change
SETTLE_AT_MOST_SECONDS = 2.0  # a thread that never stops freeing must not stall the step


class StorageTracker(Ledger, TorchDispatchMode):
    """Live storage bytes, the peak of each phase, and who held the storage at each peak (the `Ledger`'s)."""

    def __init__(self, *, settle: bool = False, record: bool = False) -> None:
        """`settle`: a real step on several ranks; each phase starts once `settle()` has run. `record`: keep the
        ledger's events (`Ledger.log`)."""
        TorchDispatchMode.__init__(self)
        Ledger.__init__(self, record=record)
        self._settle_phases = settle
        self._serial_of: dict[int, int] = {}  # id(storage) -> serial, while it lives

    # -- counting -------------------------------------------------------------------------------
    def add(self, tensor: torch.Tensor) -> None:
        self._add_storage(local_tensor(tensor).untyped_storage())

    def _add_storage(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self._serial_of:
            return
        serial = self._serial_of[key] = self.new_storage(storage.nbytes())
        weakref.finalize(storage, self._free, key, serial)

    def _resized(self, storage: torch.UntypedStorage) -> None:
        serial = self._serial_of.get(id(storage))
        if serial is None:
            self._add_storage(storage)
        else:
            self.resize_storage(serial, storage.nbytes())

    def __enter__(self) -> StorageTracker:
        original = self._original_resize = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            out = original(storage, size)
            tracker._resized(storage)
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._original_resize  # type: ignore[method-assign]

    def add_all(self, tensors: Iterable[torch.Tensor | None]) -> None:
        for t in tensors:
            if t is not None:
                self.add(t)

    def _free(self, key: int, serial: int) -> None:
        if self._serial_of.get(key) == serial:
            del self._serial_of[key]
        self.free_storage(serial)

    def enter_phase(self, phase: str) -> None:
        if self._settle_phases:
            self.settle()
        super().enter_phase(phase)

    def settle(self) -> None:
        """Before a phase on real ranks: every rank finishes its collectives (gloo's barrier waits for
        all issued before it) and their worker threads get the GIL until the live total stops moving."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return
        dist.barrier()
        quiet, deadline = 0, time.monotonic() + SETTLE_AT_MOST_SECONDS
        while quiet < SETTLED_AFTER and time.monotonic() < deadline:
            before = self.current
            time.sleep(SETTLE_POLL_SECONDS)
            quiet = quiet + 1 if self.current == before else 0

    def serials(self, tensors: Iterable[torch.Tensor | None]) -> set[int]:
        """The serial numbers of these tensors' storages (those counted and still live)."""
        out: set[int] = set()
        for t in tensors:
            if t is not None:
                serial = self._serial_of.get(id(local_tensor(t).untyped_storage()))
                if serial is not None:
                    out.add(serial)
        return out

    def bytes_of(self, tensors: Iterable[torch.Tensor | None]) -> int:
        """The bytes these tensors' counted storages hold now."""
        return sum(self.live_bytes(serial) for serial in self.serials(tensors))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor that holds the storage: a DTensor's local shard, any other tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)
