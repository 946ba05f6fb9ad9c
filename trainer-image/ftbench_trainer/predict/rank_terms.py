"""How a step's storages change with FSDP2's rank count: the terms a step family (predict.step_family) replays.

FSDP2 shards each parameter's dim 0 (its rows) over the ranks, padding every shard to ceil(rows / ranks) rows. A
storage is then a constant (activations, an unpadded gradient), a sum of shards (a parameter's, its gradient's,
its optimizer state's, an all-gather's input, a reduce-scatter's output), or a sum of padded wholes (an
all-gather's output, a reduce-scatter's input, ranks x a shard). Where the ranks split every row count evenly a
shard is rows / ranks, so each size is a constant plus a part over the ranks, solved from two rank counts. Where
a row count does not split (an odd vocabulary: granite-3's 49155 rows; LoRA's rank, 4 rows, over 8 ranks), its
shards add bytes x ceil(rows / ranks) to a storage of shards, or ranks x that to one of wholes: two rank counts
more than there are such row counts (up to MOST_PADDED) solve each storage's terms, one form or the other, as the
only one that fits with whole, non-negative bytes (a size that fits both, or neither, is no family's).
tests/trainer/test_step_family.py holds the replayed step against direct traces at rank counts none of them was
recorded at.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import lcm

# Row counts that may pad at once (LoRA's rank beside an odd vocabulary): each costs one more rank count traced.
MOST_PADDED = 2


def other_ranks(ranks: int) -> int:
    """The second rank count to trace an FSDP2 family at: half (dividing every row count `ranks` divides), or
    twice for two ranks."""
    return ranks // 2 if ranks >= 4 and ranks % 2 == 0 else ranks * 2


def uneven(rows: Sequence[int], counts: Sequence[int]) -> set[int]:
    """The row counts that some of these rank counts do not split evenly."""
    return {r for r in rows for n in counts if r % n}


def ranks_to_record(ranks: int, rows: Sequence[int]) -> list[int]:
    """The rank counts besides `ranks` to trace a family at: `other_ranks`, and where up to MOST_PADDED row counts
    do not split over those two or twice the larger (GPUs doubled), one more per such row count, chosen so their
    padded shards' terms can be told apart (`solvable`): the fewest powers of two from 2 to 16 times the larger."""
    second = other_ranks(ranks)
    larger = max(ranks, second)
    odd = uneven(rows, (ranks, second, 2 * larger))
    if not odd or len(odd) > MOST_PADDED:
        return [second]
    candidates = [1 << k for k in range(1, (16 * larger).bit_length()) if 1 << k not in (ranks, second)]
    for more in itertools.combinations(candidates, len(odd)):
        counts = (ranks, second, *more)
        if uneven(rows, counts) == odd and solvable(sorted(odd), counts):
            return [second, *more]
    return [second]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RankTerms:
    """Each sized event's bytes that depend on the ranks R: per_rank / R, plus for each row count in `padded` (those
    some rank counts do not split) its shard_row_bytes x ceil(rows / R) and its whole_row_bytes x R x
    ceil(rows / R) (per event, one per padded row count)."""

    per_rank: list[int]
    padded: tuple[int, ...] = ()
    shard_row_bytes: list[list[int]] | None = None
    whole_row_bytes: list[list[int]] | None = None

    def holds(self, rows: Sequence[int], ranks: int) -> bool:
        """Whether the terms give the step over `ranks`: every row count but the padded ones splits evenly (and the
        parts over the ranks divide)."""
        return not (uneven(rows, [ranks]) - set(self.padded)) and all(p % ranks == 0 for p in self.per_rank)

    def at(self, ranks: int) -> list[int]:
        """Each sized event's bytes that depend on the ranks, over `ranks`."""
        if not self.padded or self.shard_row_bytes is None or self.whole_row_bytes is None:
            return [p // ranks for p in self.per_rank]
        shards = [ceil_div(n, ranks) for n in self.padded]
        return [
            p // ranks + sum(s * (a + ranks * b) for s, a, b in zip(shards, by_shard, by_whole, strict=True))
            for p, by_shard, by_whole in zip(self.per_rank, self.shard_row_bytes, self.whole_row_bytes, strict=True)
        ]


def fitted(sizes: Sequence[Sequence[int]], counts: Sequence[int], rows: Sequence[int]) -> RankTerms | None:
    """The terms of the sized events recorded at each rank count (`sizes[k]` at `counts[k]`, counts distinct):
    from two where they split every row count, else from two more than the row counts that do not split (up to
    MOST_PADDED); None where the sizes are of neither form."""
    if len(set(counts)) != len(counts) or len(counts) < 2 or min(counts) < 2:
        return None
    odd = sorted(uneven(rows, counts))
    if not odd:
        return _even(sizes[0], sizes[1], counts[0], counts[1])
    if len(odd) > MOST_PADDED or len(counts) != 2 + len(odd):
        return None
    return _padded(sizes, counts, odd)


def _even(x: Sequence[int], y: Sequence[int], ra: int, rb: int) -> RankTerms | None:
    """x - y = part / ra - part / rb for each size: the part FSDP2 divides by the ranks (bytes x ranks)."""
    out = []
    for a, b in zip(x, y, strict=True):
        part, rest = divmod((a - b) * ra * rb, rb - ra)
        if rest or part % ra or part % rb:
            return None
        out.append(part)
    return RankTerms(out)


# Each form's row at R ranks, times R (integers): constant, part over the ranks, and each padded row count's term.
FORMS: dict[str, Callable[[Sequence[int], int], list[int]]] = {
    "shards": lambda padded, r: [r, 1, *(r * ceil_div(n, r) for n in padded)],
    "wholes": lambda padded, r: [r, 1, *(r * r * ceil_div(n, r) for n in padded)],
}


def solvable(padded: Sequence[int], counts: Sequence[int]) -> bool:
    """Whether sizes at these rank counts tell each form's terms apart for the `padded` row counts (a system of full
    rank: granite-3.3's 49159 rows pad to 49160 over 2, 4 and 8 ranks alike, as if they split, so those three cannot
    say what 16 ranks' 49168 add)."""
    return all(_Solver([row(padded, r) for r in counts]).inverse is not None for row in FORMS.values())


def _padded(sizes: Sequence[Sequence[int]], counts: Sequence[int], padded: Sequence[int]) -> RankTerms | None:
    solvers = {name: _Solver([row(padded, r) for r in counts]) for name, row in FORMS.items()}
    per_rank: list[int] = []
    shards: list[list[int]] = []
    wholes: list[list[int]] = []
    none = [0] * len(padded)
    for values in zip(*sizes, strict=True):
        scaled = [r * v for r, v in zip(counts, values, strict=True)]
        fits = {name: s.solve(scaled) for name, s in solvers.items()}
        found = {name: terms for name, terms in fits.items() if terms is not None}
        if not found or (len(found) > 1 and any(any(terms[2:]) for terms in found.values())):
            return None  # neither form, or both and they differ beyond these rank counts
        name, terms = next(iter(found.items()))
        per_rank.append(terms[1])
        shards.append(terms[2:] if name == "shards" else none)
        wholes.append(terms[2:] if name == "wholes" else none)
    return RankTerms(per_rank, tuple(padded), shards, wholes)


class _Solver:
    """Exact whole, non-negative solutions of a fixed square integer system: its inverse as integers over one
    denominator, computed once (a family has thousands of sizes to solve); None where it is singular."""

    def __init__(self, rows: Sequence[Sequence[int]]) -> None:
        n = len(rows)
        work = [[Fraction(x) for x in row] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(rows)]
        self.inverse: list[list[int]] | None = None
        self.denominator = 1
        for col in range(n):  # Gauss-Jordan on [rows | identity]
            pivot = next((i for i in range(col, n) if work[i][col] != 0), None)
            if pivot is None:
                return
            work[col], work[pivot] = work[pivot], work[col]
            lead = work[col][col]
            work[col] = [x / lead for x in work[col]]
            for i in range(n):
                if i != col and work[i][col] != 0:
                    factor = work[i][col]
                    work[i] = [x - factor * y for x, y in zip(work[i], work[col], strict=True)]
        inverse = [row[n:] for row in work]
        self.denominator = lcm(*(x.denominator for row in inverse for x in row))
        self.inverse = [[int(x * self.denominator) for x in row] for row in inverse]

    def solve(self, values: Sequence[int]) -> list[int] | None:
        if self.inverse is None:
            return None
        out = []
        for row in self.inverse:
            whole, rest = divmod(sum(x * v for x, v in zip(row, values, strict=True)), self.denominator)
            if rest or whole < 0:
                return None
            out.append(whole)
        return out
