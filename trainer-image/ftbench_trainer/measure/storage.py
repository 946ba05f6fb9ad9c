"""Count live tensor storage during a training step, by phase and by what holds it.

A `TorchDispatchMode` sees every op's outputs; each new storage is counted once, rounded up to
the CUDA caching allocator's 512-byte blocks, and uncounted when Python frees it. This works the
same for fake tensors (the prediction) and real ones (measuring a real step with the same rule),
which is what makes the two comparable. A real FSDP2 step (DTensor shards, `UntypedStorage.resize_`),
collectives' buffers freed late on real ranks (`settle`) and the split at each phase's peak
(`split_at`) are handled here too.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/measure/storage.py".
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ftbench_trainer.measure.split import Split

ALLOCATOR_BLOCK_BYTES = 512
SETTLE_POLL_SECONDS = 0.005
SETTLED_AFTER = 5  # polls in a row without a change
SETTLE_AT_MOST_SECONDS = 2.0  # a thread that never stops freeing must not stall the step


def allocator_bytes(nbytes: int) -> int:
    """What the CUDA caching allocator hands out for a request: rounded up to 512-byte blocks."""
    return -(-nbytes // ALLOCATOR_BLOCK_BYTES) * ALLOCATOR_BLOCK_BYTES


@dataclass
class PhasePeak:
    """The highest live total reached in one phase and which storages made it."""

    bytes: int = 0
    live: dict[int, int] = field(default_factory=dict)


class StorageTracker(TorchDispatchMode):
    """Live storage bytes, the peak of each phase, and who held the storage at each peak."""

    def __init__(self, *, settle: bool = False) -> None:
        """`settle`: a real step on several ranks; each phase starts once `settle()` has run."""
        super().__init__()
        self._settle_phases = settle
        self._serial_of: dict[int, int] = {}  # id(storage) -> serial, while it lives
        self._live: dict[int, int] = {}  # serial -> bytes
        self._next = 0
        self.current = 0
        self.phase = "forward"
        self.peaks: dict[str, PhasePeak] = {}
        self.ends: dict[str, PhasePeak] = {}  # what was live as each phase ended (its last run)
        self._rising = False

    # -- counting -------------------------------------------------------------------------------
    def add(self, tensor: torch.Tensor) -> None:
        self._add_storage(_local(tensor).untyped_storage())

    def _add_storage(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self._serial_of:
            return
        serial = self._next
        self._next += 1
        self._serial_of[key] = serial
        self._live[serial] = 0
        weakref.finalize(storage, self._free, key, serial)
        self._resize(serial, allocator_bytes(storage.nbytes()))

    def _resize(self, serial: int, nbytes: int) -> None:
        """A counted storage now holds `nbytes` (made, or resized by FSDP2)."""
        if nbytes < self._live[serial]:
            self._snapshot_if_rising()
        self.current += nbytes - self._live[serial]
        self._live[serial] = nbytes
        peak = self.peaks.setdefault(self.phase, PhasePeak())
        if self.current > peak.bytes:
            peak.bytes = self.current
            self._rising = True

    def _resized(self, storage: torch.UntypedStorage) -> None:
        serial = self._serial_of.get(id(storage))
        if serial is None:
            self._add_storage(storage)
        else:
            self._resize(serial, allocator_bytes(storage.nbytes()))

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
        self._snapshot_if_rising()
        if self._serial_of.get(key) == serial:
            del self._serial_of[key]
        self.current -= self._live.pop(serial, 0)

    def _snapshot_if_rising(self) -> None:
        # The live set is copied only when a rise ends (the first free after it), not at every alloc.
        if self._rising:
            self.peaks[self.phase].live = dict(self._live)
            self._rising = False

    def enter_phase(self, phase: str) -> None:
        if self._settle_phases:
            self.settle()
        self._snapshot_if_rising()
        self._record_end()
        self.phase = phase

    def finish(self) -> None:
        self._snapshot_if_rising()
        self._record_end()

    def _record_end(self) -> None:
        # A phase's end (backward's: every gradient made) can be its peak at full depth while an early
        # transient (the loss) is its peak at the reduced depth traced; predict.depth scales both.
        if self.phase in self.peaks:
            self.ends[self.phase] = PhasePeak(self.current, dict(self._live))

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
                serial = self._serial_of.get(id(_local(t).untyped_storage()))
                if serial is not None:
                    out.add(serial)
        return out

    def bytes_of(self, tensors: Iterable[torch.Tensor | None]) -> int:
        """The bytes these tensors' counted storages hold now."""
        return sum(self._live.get(serial, 0) for serial in self.serials(tensors))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor that holds the storage: a DTensor's local shard, any other tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)


def split_at(peak: PhasePeak, *, parameters: set[int], gradients: set[int], optimizer: set[int]) -> Split:
    """Sort a peak's live storages; what is neither parameter, gradient nor optimizer state is `other`."""
    sums = {"p": 0, "g": 0, "o": 0, "x": 0}
    for serial, nbytes in peak.live.items():
        kind = "p" if serial in parameters else "g" if serial in gradients else "o" if serial in optimizer else "x"
        sums[kind] += nbytes
    return Split(sums["p"], sums["g"], sums["o"], sums["x"])
