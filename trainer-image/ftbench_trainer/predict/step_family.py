"""A step's trace at another per-device batch or FSDP2 rank count, from a few traces: no new trace for either.

A trace is the storages a step makes, resizes and frees, in order (`measure.ledger`'s log), and what holds
each one. The batch and the ranks change the sizes, not the ops, their order or what frees what. The batch
is a factor of a tensor's shape at most once, so each size lies on a line in the batch; FSDP2 divides the
parameters' rows by the ranks, so each size is a constant plus a part over the ranks, and a term for the padded
shards of each row count that does not split (predict.rank_terms). Steps recorded at consecutive batches (three
for an MoE model, whose balanced routing deals token slots in integer shares) and at a second rank count (one
more for each row count whose shards pad) give each size's terms; replaying the events through the
same `Ledger` with the sizes elsewhere gives what a trace there gives, byte for byte
(tests/trainer/test_step_family.py against direct traces). Torch-free: a replay imports no torch.

trl's fused LM head, traced on its GPU branch (predict.fused_head), makes the same storages at every batch;
all but its tile buffers lie on lines, and those have a row per labelled token up to a fixed count, which the
trace marks (the ledger's TILE event) and the family sizes by that rule.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ftbench_trainer.measure.ledger import NEW, RESIZE, TILE, Event, Ledger, replay, sized_events, split_at, structure
from ftbench_trainer.measure.split import Split
from ftbench_trainer.predict.rank_terms import RankTerms, fitted
from ftbench_trainer.predict.step import PHASES, StepShape, Trace

# A batch of one row is a different step: torch ignores the strides of a size-1 dimension, so some copies
# (`contiguous`, `reshape`) are not made. A family holds from two rows on.
FEWEST_ROWS = 2
# Tokens per tile of trl's fused LM head (trl 1.16's `TOKEN_CHUNK_SIZE`; predict.fused_head refuses a trl with
# another): its buffer holds min(labelled tokens, this) rows.
FUSED_HEAD_TILE_TOKENS = 4096
# Consecutive batches a family is recorded at: three for an MoE model, whose balanced routing deals token slots in
# integer shares (two for a dense one).
MOST_RECORDINGS = 3


@dataclass(frozen=True)
class Holders:
    """The serial numbers of the storages that hold parameters, gradients and optimizer state."""

    parameters: frozenset[int]
    gradients: frozenset[int]
    optimizer: frozenset[int]


def splits(ledger: Ledger, holders: Holders) -> tuple[dict[str, Split], dict[str, Split], dict[str, Split]]:
    """Each phase's peak, forward's and backward's ends and each phase's tail peak, by holder: `Trace`'s phases,
    ends and tails."""

    def split(peak: Any) -> Split:
        return split_at(
            peak, parameters=set(holders.parameters), gradients=set(holders.gradients), optimizer=set(holders.optimizer)
        )

    phases = {name: split(ledger.peaks[name]) for name in PHASES if name in ledger.peaks}
    ends: dict[str, Split] = {p: split(ledger.ends[p]) for p in ("forward", "backward") if p in ledger.ends}
    tails = {name: split(ledger.tails[name]) for name in PHASES if name in ledger.tails}
    if "optimizer" in phases:  # what the step allocates beyond its state (foreach's temporaries) is the optimizer's
        o = phases["optimizer"]
        phases["optimizer"] = Split(o.parameters, o.gradients, o.optimizer + o.other, 0)
    return phases, ends, tails


@dataclass(frozen=True)
class Recording:
    """A traced step with its events: what `family` needs."""

    trace: Trace
    batch: int
    ranks: int | None  # FSDP2's ranks, None without FSDP2
    log: list[Event]
    holders: Holders
    rows: tuple[int, ...] = ()  # each parameter's dim 0, the one FSDP2 shards (with FSDP2)


def replayable(shape: StepShape, *, sharded: bool = False) -> bool:
    """Whether the step's events are those of other batches, or for one row (its own step, see FEWEST_ROWS) those
    of other FSDP2 rank counts (`sharded`); not under trl's fused LM head on the CPU, whose fold makes temporaries
    for each tile of tokens (the batch changes how many tiles there are); on a GPU its Triton kernels make none
    (predict.fused_head)."""
    return (shape.batch >= FEWEST_ROWS or sharded) and (not shape.fused_lm_head or shape.device == "cuda")


def labelled_tokens(shape: StepShape) -> tuple[int, int]:
    """The positions trl's fused LM head scores (after the shift, a label for every token but the last) and how
    many carry a label: all of them in a traced batch but prompt tuning's virtual tokens (`trace.PromptTuned`
    labels them -100)."""
    if shape.method == "pt":
        return shape.batch * (shape.seq + shape.pt_virtual_tokens - 1), shape.batch * shape.seq
    positions = shape.batch * (shape.seq - 1)
    return positions, positions


def batch_span(shape: StepShape) -> tuple[int, int | None]:
    """The batches whose steps replay as `shape`'s (the highest None: no end): from FEWEST_ROWS on; one row only
    itself (at other rank counts)."""
    if shape.batch < FEWEST_ROWS:
        return shape.batch, shape.batch
    return FEWEST_ROWS, None


def tile_rows(batch: int, labelled_per_row: int) -> int:
    """Rows of trl's fused LM head's tile buffer at `batch` rows of `labelled_per_row` labelled tokens each."""
    return min(batch * labelled_per_row, FUSED_HEAD_TILE_TOKENS)


def batches_to_record(shape: StepShape, *, moe: bool) -> list[int]:
    """The batches to trace for a family: the asked one and the next one or two (one row: itself)."""
    low, high = batch_span(shape)
    if low == high:  # one row: at its rank counts only
        return [low]
    return [shape.batch + i for i in range(MOST_RECORDINGS if moe else 2)]


def _untimed(trace: Trace) -> Trace:
    return dataclasses.replace(trace, seconds=0.0)


def _same_but_sizes(a: Trace, b: Trace) -> bool:
    ignore = {"phases": {}, "ends": {}, "tails": {}, "seconds": 0.0}
    return dataclasses.replace(a, **ignore) == dataclasses.replace(b, **ignore)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StepFamily:
    """One step at other per-device batches and FSDP2 rank counts: its events, and each sized event's bytes at
    `batch` and `ranks`, per row more (`slopes`) and over the ranks (`per_rank`: bytes x ranks, the part FSDP2
    shards; None: these ranks only)."""

    trace: Trace  # at `batch`: the fields the batch does not change (model sizes, routing) are read from it
    log: list[Event]
    holders: Holders
    batch: int
    ranks: int | None
    sizes: list[int]
    slopes: list[int]
    per_rank: list[int] | None = None
    rows: tuple[int, ...] = ()
    span: tuple[int, int | None] = (FEWEST_ROWS, None)  # the batches it holds (`batch_span`)
    labelled_per_row: int = 0  # under trl's fused LM head: labelled tokens per row (`tile_rows`)
    tile_row_bytes: list[int] | None = None  # per sized event: a tile buffer's bytes per row, 0 for the others
    padded: tuple[int, ...] = ()  # the row counts some rank counts do not split, with their terms (rank_terms)
    shard_row_bytes: list[list[int]] | None = None
    whole_row_bytes: list[list[int]] | None = None

    def answers(self, batch: int, ranks: int | None) -> bool:
        """Whether `at` gives this step: a batch within its span (one row is a span of its own, see FEWEST_ROWS);
        other ranks need the terms over the ranks, and every parameter's rows split evenly over them but those of
        the row counts whose padded shards the terms hold (`padded`)."""
        low, high = self.span
        if batch < low or (high is not None and batch > high):
            return False
        if ranks != self.ranks:
            terms = self.rank_terms()
            return terms is not None and ranks is not None and ranks > 1 and terms.holds(self.rows, ranks)
        return True

    def rank_terms(self) -> RankTerms | None:
        if self.per_rank is None:
            return None
        return RankTerms(self.per_rank, self.padded, self.shard_row_bytes, self.whole_row_bytes)

    def at(self, batch: int, ranks: int | None = None) -> Trace:
        """The step at `batch` rows per device over `ranks` (default: the family's)."""
        started = time.perf_counter()
        ranks = self.ranks if ranks is None else ranks
        if not self.answers(batch, ranks):
            raise ValueError(f"this family does not hold a step of {batch} rows per device over {ranks} ranks")
        phases, ends, tails = splits(replay(self.log, self.sizes_at(batch, ranks)), self.holders)
        seconds = time.perf_counter() - started
        return dataclasses.replace(self.trace, phases=phases, ends=ends, tails=tails, seconds=seconds)

    def sizes_at(self, batch: int, ranks: int | None) -> list[int]:
        sizes = list(self.sizes)
        if batch != self.batch:
            sizes = [s + k * (batch - self.batch) for s, k in zip(sizes, self.slopes, strict=True)]
        terms = self.rank_terms()
        if ranks != self.ranks and terms is not None and ranks and self.ranks:
            there, here = terms.at(ranks), terms.at(self.ranks)
            sizes = [s + a - b for s, a, b in zip(sizes, there, here, strict=True)]
        if self.tile_row_bytes is not None:
            rows = tile_rows(batch, self.labelled_per_row)
            sizes = [rows * b if b else s for s, b in zip(sizes, self.tile_row_bytes, strict=True)]
        return sizes

    def to_wire(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            **fields,
            "trace": dataclasses.asdict(self.trace),
            "holders": {k: sorted(v) for k, v in dataclasses.asdict(self.holders).items()},
            "rows": list(self.rows),
            "padded": list(self.padded),
            "span": list(self.span),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any], trace: Trace) -> StepFamily:
        holders = Holders(**{k: frozenset(v) for k, v in data["holders"].items()})
        names = ("log", "batch", "ranks", "sizes", "slopes", "per_rank", "labelled_per_row", "shard_row_bytes",
                 "whole_row_bytes")  # fmt: skip
        fields = {k: data[k] for k in names}
        low, high = data["span"]
        return cls(
            trace=trace,
            holders=holders,
            rows=tuple(data["rows"]),
            padded=tuple(data["padded"]),
            span=(low, high),
            tile_row_bytes=data["tile_row_bytes"],
            **fields,
        )


def _tile_row_bytes(first: Recording, labelled_per_row: int) -> list[int] | None:
    """Per sized event, a tile buffer's bytes per row (the NEW before a TILE mark), 0 for the others; None for a log
    with no tile buffer. A tile whose bytes do not divide by its rows is not one `tile_rows` sizes: ValueError."""
    marked: list[bool] = []
    for event in first.log:
        if event[0] in (NEW, RESIZE):
            marked.append(False)
        elif event[0] == TILE:
            marked[-1] = True
    if not any(marked):
        return None
    rows = tile_rows(first.batch, labelled_per_row)
    out = []
    for size, tile in zip(sized_events(first.log), marked, strict=True):
        if tile and (rows <= 0 or size % rows):
            raise ValueError(f"a tile buffer of {size} bytes is not {rows} rows")
        out.append(size // rows if tile else 0)
    return out


def family(
    recordings: Sequence[Recording],
    ranks: Sequence[Recording] = (),
    span: tuple[int, int | None] = (FEWEST_ROWS, None),
    labelled_per_row: int = 0,
) -> StepFamily | None:
    """The family of the recordings (at consecutive batches within `span`, the first one first) and, where given,
    the first one's step at other rank counts (predict.rank_terms); None where they disagree: their events differ,
    a size is off its line, or the family does not give back each recording. `labelled_per_row`: under trl's fused
    LM head, how many labelled tokens a row holds (its tile buffers' rows, `tile_rows`)."""
    first = recordings[0]
    if [r.batch - first.batch for r in recordings] != list(range(len(recordings))):
        raise ValueError("recordings at consecutive batches, the first one first")
    if first.batch < span[0] or (span[1] is not None and recordings[-1].batch > span[1]):
        raise ValueError(f"recordings at batches {first.batch}-{recordings[-1].batch}, outside the span {span}")
    others = [*recordings[1:], *ranks]
    frame = structure(first.log)
    if any(r.holders != first.holders or not _same_but_sizes(r.trace, first.trace) for r in others):
        return None
    if any(structure(r.log) != frame or r.rows != first.rows for r in others):
        return None
    sizes = sized_events(first.log)
    slopes = [0] * len(sizes)  # one recording (one row): a family of rank counts only
    if len(recordings) > 1:
        slopes = [b - a for a, b in zip(sizes, sized_events(recordings[1].log), strict=True)]
    terms = None
    if ranks and first.ranks is not None and all(r.ranks is not None for r in ranks):
        counts = [first.ranks, *(r.ranks for r in ranks if r.ranks is not None)]
        terms = fitted([sized_events(r.log) for r in (first, *ranks)], counts, first.rows)
    tiles = _tile_row_bytes(first, labelled_per_row)
    out = StepFamily(
        first.trace,
        first.log,
        first.holders,
        first.batch,
        first.ranks,
        sizes,
        slopes,
        terms.per_rank if terms else None,
        first.rows,
        span,
        labelled_per_row if tiles is not None else 0,
        tiles,
        terms.padded if terms else (),
        terms.shard_row_bytes if terms else None,
        terms.whole_row_bytes if terms else None,
    )
    checks = [*recordings, *(ranks if terms is not None else [])]
    for r in checks:
        on_line = out.sizes_at(r.batch, r.ranks)
        if on_line != sized_events(r.log) or _untimed(out.at(r.batch, r.ranks)) != _untimed(r.trace):
            return None
    return out
