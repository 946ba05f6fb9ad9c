"""How a step's storages change with FSDP2's rank count: the terms a step family (predict.step_family) replays.

FSDP2 shards each parameter's dim 0 (its rows) over the ranks, padding every shard to ceil(rows / ranks) rows. A
storage is then a constant (activations, an unpadded gradient), a sum of shards (a parameter's, its gradient's,
its optimizer state's, an all-gather's input, a reduce-scatter's output), or a sum of padded wholes (an
all-gather's output, a reduce-scatter's input, ranks x a shard). Where the ranks split every row count evenly a
shard is rows / ranks, so each size is a constant plus a part over the ranks, solved from two rank counts. Where
one row count does not split (an odd vocabulary: granite-3's 49155 rows; LoRA's rank, 4 rows, over 8 ranks),
its shards add bytes x ceil(rows / ranks) to a storage of shards, or ranks x that to one of wholes: three rank
counts solve each storage's three terms, one form or the other, as the only one that fits with whole,
non-negative bytes (a size that fits both, or neither, is no family's). tests/trainer/test_step_family.py holds
the replayed step against direct traces at rank counts none of them was recorded at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def other_ranks(ranks: int) -> int:
    """The second rank count to trace an FSDP2 family at: half (dividing every row count `ranks` divides), or
    twice for two ranks."""
    return ranks // 2 if ranks >= 4 and ranks % 2 == 0 else ranks * 2


def uneven(rows: Sequence[int], counts: Sequence[int]) -> set[int]:
    """The row counts that some of these rank counts do not split evenly."""
    return {r for r in rows for n in counts if r % n}


def ranks_to_record(ranks: int, rows: Sequence[int]) -> list[int]:
    """The rank counts besides `ranks` to trace a family at: `other_ranks`, and where exactly one row count does not
    split over them and a third (two ranks, else twice the larger), a third rank count that tells its padded shards'
    terms apart (`solvable`): two ranks, else 2, 4, 8 or 16 times the larger of the two."""
    second = other_ranks(ranks)
    larger = max(ranks, second)
    probe = 2 if 2 not in (ranks, second) else 2 * larger
    odd = uneven(rows, (ranks, second, probe))
    if len(odd) != 1:
        return [second]
    (padded,) = odd
    for third in (probe, *(k * larger for k in (2, 4, 8, 16))):
        counts = (ranks, second, third)
        if third not in (ranks, second) and uneven(rows, counts) == odd and solvable(padded, counts):
            return [second, third]
    return [second]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RankTerms:
    """Each sized event's bytes that depend on the ranks R: per_rank / R, plus for the one row count `padded` that
    some rank counts do not split (0: none), shard_row_bytes x ceil(padded / R) and whole_row_bytes x R x
    ceil(padded / R)."""

    per_rank: list[int]
    padded: int = 0
    shard_row_bytes: list[int] | None = None
    whole_row_bytes: list[int] | None = None

    def holds(self, rows: Sequence[int], ranks: int) -> bool:
        """Whether the terms give the step over `ranks`: every row count but `padded` splits evenly (and the parts
        over the ranks divide)."""
        return not (uneven(rows, [ranks]) - {self.padded}) and all(p % ranks == 0 for p in self.per_rank)

    def at(self, ranks: int) -> list[int]:
        """Each sized event's bytes that depend on the ranks, over `ranks`."""
        shard = ceil_div(self.padded, ranks) if self.padded else 0
        by_shard = self.shard_row_bytes or [0] * len(self.per_rank)
        by_whole = self.whole_row_bytes or [0] * len(self.per_rank)
        return [
            p // ranks + a * shard + b * ranks * shard
            for p, a, b in zip(self.per_rank, by_shard, by_whole, strict=True)
        ]


def fitted(sizes: Sequence[Sequence[int]], counts: Sequence[int], rows: Sequence[int]) -> RankTerms | None:
    """The terms of the sized events recorded at each rank count (`sizes[k]` at `counts[k]`, counts distinct):
    from two where they split every row count, else from three where exactly one row count is uneven; None where
    the sizes are of neither form."""
    if len(set(counts)) != len(counts) or len(counts) < 2 or min(counts) < 2:
        return None
    odd = uneven(rows, counts)
    if not odd:
        return _even(sizes[0], sizes[1], counts[0], counts[1])
    if len(odd) > 1 or len(counts) < 3:
        return None
    return _padded(sizes[:3], counts[:3], odd.pop())


def _even(x: Sequence[int], y: Sequence[int], ra: int, rb: int) -> RankTerms | None:
    """x - y = part / ra - part / rb for each size: the part FSDP2 divides by the ranks (bytes x ranks)."""
    out = []
    for a, b in zip(x, y, strict=True):
        part, rest = divmod((a - b) * ra * rb, rb - ra)
        if rest or part % ra or part % rb:
            return None
        out.append(part)
    return RankTerms(out)


# Each form's row at R ranks, times R (integers): constant, part over the ranks, and the padded row count's term.
FORMS = {
    "shards": lambda n, r: (r, 1, r * ceil_div(n, r)),
    "wholes": lambda n, r: (r, 1, r * r * ceil_div(n, r)),
}


def solvable(padded: int, counts: Sequence[int]) -> bool:
    """Whether sizes at these three rank counts tell each form's terms apart for `padded` rows (a system of full
    rank: granite-3.3's 49159 rows pad to 49160 over 2, 4 and 8 ranks alike, as if they split, so those three cannot
    say what 16 ranks' 49168 add)."""
    return all(_Solver([row(padded, r) for r in counts]).det != 0 for row in FORMS.values())


def _padded(sizes: Sequence[Sequence[int]], counts: Sequence[int], n: int) -> RankTerms | None:
    solvers = {name: _Solver([row(n, r) for r in counts]) for name, row in FORMS.items()}
    per_rank, shards, wholes = [], [], []
    for values in zip(*sizes, strict=True):
        scaled = [r * v for r, v in zip(counts, values, strict=True)]
        fits = {name: s.solve(scaled) for name, s in solvers.items()}
        found = {name: terms for name, terms in fits.items() if terms is not None}
        if not found or (len(found) > 1 and any(terms[2] for terms in found.values())):
            return None  # neither form, or both and they differ beyond these rank counts
        name, (_, part, padded) = next(iter(found.items()))
        per_rank.append(part)
        shards.append(padded if name == "shards" else 0)
        wholes.append(padded if name == "wholes" else 0)
    return RankTerms(per_rank, n, shards, wholes)


class _Solver:
    """Exact whole, non-negative solutions of a fixed 3 x 3 integer system (Cramer's rule by the adjugate, computed
    once: a family has thousands of sizes to solve)."""

    def __init__(self, rows: Sequence[Sequence[int]]) -> None:
        (a, b, c), (d, e, f), (g, h, i) = rows
        self.det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
        self.adjugate = (
            (e * i - f * h, c * h - b * i, b * f - c * e),
            (f * g - d * i, a * i - c * g, c * d - a * f),
            (d * h - e * g, b * g - a * h, a * e - b * d),
        )

    def solve(self, values: Sequence[int]) -> tuple[int, int, int] | None:
        if self.det == 0:
            return None
        out = []
        for row in self.adjugate:
            whole, rest = divmod(sum(x * v for x, v in zip(row, values, strict=True)), self.det)
            if rest or whole < 0:
                return None
            out.append(whole)
        return out[0], out[1], out[2]
