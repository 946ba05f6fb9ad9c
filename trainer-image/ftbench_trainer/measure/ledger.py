"""Live storage bytes by serial number, each phase's peak and end: the storage tracker's bookkeeping, torch-free.

`StorageTracker` feeds it from torch's dispatch; a `Ledger` made with `record=True` also keeps the
events it was fed (a storage made, resized or freed, a phase entered), so the same step can be
replayed later with other sizes (`predict.step_family`) through this same code, and so gives the
same peaks a trace would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftbench_trainer.measure.split import Split

ALLOCATOR_BLOCK_BYTES = 512
# Event codes in a recorded log: [NEW, raw bytes], [RESIZE, serial, raw bytes], [FREE, serial], [PHASE, name], [END],
# [TAIL], [TILE] (the storage the NEW before it made is trl's fused LM head's tile buffer: predict.step_family sizes
# it by its own rule).
NEW, RESIZE, FREE, PHASE, END, TAIL, TILE = range(7)
Event = list[int | str]


def allocator_bytes(nbytes: int) -> int:
    """What the CUDA caching allocator hands out for a request: rounded up to 512-byte blocks."""
    return -(-nbytes // ALLOCATOR_BLOCK_BYTES) * ALLOCATOR_BLOCK_BYTES


@dataclass
class PhasePeak:
    """The highest live total reached in one phase and which storages made it."""

    bytes: int = 0
    live: dict[int, int] = field(default_factory=dict)


class Ledger:
    """Live bytes per storage serial; the peak of each phase with who held it, what was live as it ended, and the
    peak of its tail (from its last `enter_tail` to its end)."""

    def __init__(self, *, record: bool = False) -> None:
        self._live: dict[int, int] = {}  # serial -> bytes
        self._next = 0
        self.current = 0
        self.phase = "forward"
        self.peaks: dict[str, PhasePeak] = {}
        self.ends: dict[str, PhasePeak] = {}  # what was live as each phase ended (its last run)
        self.tails: dict[str, PhasePeak] = {}  # each phase's peak from its last `enter_tail` on (its highest run)
        self._tail: PhasePeak | None = None  # this run's, from its latest `enter_tail`
        self._rising = False
        self._tail_rising = False
        self.log: list[Event] | None = [] if record else None
        self._logging = record  # until `finish`: storages freed after the step (the model torn down) are not its events
        self._tile_next = False

    def _log(self, event: Event) -> None:
        if self.log is not None:
            self.log.append(event)

    def new_storage(self, raw: int) -> int:
        """A storage of `raw` bytes was made: its serial."""
        if self._logging:
            self._log([NEW, raw])
            if self._tile_next:
                self._log([TILE])
        self._tile_next = False
        serial = self._next
        self._next += 1
        self._live[serial] = 0
        self._set(serial, allocator_bytes(raw))
        return serial

    def tile_next(self) -> None:
        """The next storage made is trl's fused LM head's tile buffer (predict.fused_head sees it made)."""
        self._tile_next = True

    def resize_storage(self, serial: int, raw: int) -> None:
        """A counted storage now holds `raw` bytes (FSDP2 resizes its gathered parameters)."""
        if self._logging:
            self._log([RESIZE, serial, raw])
        self._set(serial, allocator_bytes(raw))

    def _set(self, serial: int, nbytes: int) -> None:
        if nbytes < self._live[serial]:
            self._snapshot_if_rising()
        self.current += nbytes - self._live[serial]
        self._live[serial] = nbytes
        peak = self.peaks.setdefault(self.phase, PhasePeak())
        if self.current > peak.bytes:
            peak.bytes = self.current
            self._rising = True
        if self._tail is not None and self.current > self._tail.bytes:
            self._tail.bytes = self.current
            self._tail_rising = True

    def free_storage(self, serial: int) -> None:
        if self._logging:
            self._log([FREE, serial])
        self._snapshot_if_rising()
        self.current -= self._live.pop(serial, 0)

    def live_bytes(self, serial: int) -> int:
        return self._live.get(serial, 0)

    def _snapshot_if_rising(self) -> None:
        # The live set is copied only when a rise ends (the first free after it), not at every alloc.
        if self._rising:
            self.peaks[self.phase].live = dict(self._live)
            self._rising = False
        if self._tail_rising and self._tail is not None:
            self._tail.live = dict(self._live)
            self._tail_rising = False

    def enter_phase(self, phase: str) -> None:
        if self._logging:
            self._log([PHASE, phase])
        self._snapshot_if_rising()
        self._record_end()
        self.phase = phase

    def enter_tail(self) -> None:
        """The phase's tail starts again here: its peak is kept apart from here to the phase's end (backward's last
        tail: the backward of the lowest decoder layer it reaches, and below, when nearly every gradient is made;
        at full depth that can be the phase's peak while an earlier moment is at the reduced depth traced,
        predict.depth)."""
        if self._logging:
            self._log([TAIL])
        self._snapshot_if_rising()
        self._tail = PhasePeak(self.current, dict(self._live))

    def finish(self) -> None:
        if self._logging:
            self._log([END])
            self._logging = False
        self._snapshot_if_rising()
        self._record_end()

    def _record_end(self) -> None:
        # A phase's end (backward's: every gradient made) can be its peak at full depth while an early
        # transient (the loss) is its peak at the reduced depth traced; predict.depth scales both.
        if self.phase in self.peaks:
            self.ends[self.phase] = PhasePeak(self.current, dict(self._live))
        tail, self._tail = self._tail, None
        if tail is not None and tail.bytes > self.tails.get(self.phase, PhasePeak(-1)).bytes:
            self.tails[self.phase] = tail


def replay(log: list[Event], raw_sizes: list[int]) -> Ledger:
    """`log` fed again to a new ledger, the n-th NEW or RESIZE event with `raw_sizes[n]` bytes."""
    ledger = Ledger()
    sizes = iter(raw_sizes)
    for event in log:
        code = event[0]
        if code == NEW:
            ledger.new_storage(next(sizes))
        elif code == RESIZE:
            ledger.resize_storage(int(event[1]), next(sizes))
        elif code == FREE:
            ledger.free_storage(int(event[1]))
        elif code == PHASE:
            ledger.enter_phase(str(event[1]))
        elif code == TAIL:
            ledger.enter_tail()
        elif code == END:
            ledger.finish()
    return ledger


def sized_events(log: list[Event]) -> list[int]:
    """The raw sizes of a log's NEW and RESIZE events, in order (what `replay` takes)."""
    return [int(e[-1]) for e in log if e[0] in (NEW, RESIZE)]


def structure(log: list[Event]) -> list[Event]:
    """The log without its sizes: two steps replay alike when these are equal."""
    return [e[:-1] if e[0] in (NEW, RESIZE) else e for e in log]


def split_at(peak: PhasePeak, *, parameters: set[int], gradients: set[int], optimizer: set[int]) -> Split:
    """Sort a peak's live storages; what is neither parameter, gradient nor optimizer state is `other`."""
    sums = {"p": 0, "g": 0, "o": 0, "x": 0}
    for serial, nbytes in peak.live.items():
        kind = "p" if serial in parameters else "g" if serial in gradients else "o" if serial in optimizer else "x"
        sums[kind] += nbytes
    return Split(sums["p"], sums["g"], sums["o"], sums["x"])
