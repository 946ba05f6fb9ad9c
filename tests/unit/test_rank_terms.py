"""FSDP2's rank terms (predict.rank_terms) on sizes made by the rule they stand for: a storage of shards padded to
ceil(rows / ranks) rows, one of padded wholes, a constant; refused where the sizes fit neither form or both."""

from __future__ import annotations

import pytest

from ftbench_trainer.predict.rank_terms import RankTerms, ceil_div, fitted, other_ranks, ranks_to_record, solvable

VOCAB = 49155  # granite-3's: odd, so no even rank count splits it
GRANITE_33 = 49159
ROWS = (1024, 4096, 12800, VOCAB)


def sizes(ranks: int) -> list[int]:
    """A step's storages at `ranks`: activations, an even weight's shard, the vocabulary's shard (8192 bytes a
    row), an all-gather of both (their padded wholes), and a buffer of both shards."""
    vocab, even = ceil_div(VOCAB, ranks), 4096 // ranks
    return [777, 512 * even, 8192 * vocab, 8192 * ranks * vocab + 512 * 4096, 8192 * vocab + 512 * even]


@pytest.mark.parametrize("counts", [(4, 2, 8), (8, 4, 2), (16, 8, 2), (2, 4, 8)])
def test_three_rank_counts_give_a_padded_row_counts_terms(counts: tuple[int, int, int]) -> None:
    terms = fitted([sizes(r) for r in counts], counts, ROWS)
    assert terms is not None and terms.padded == (VOCAB,)
    for ranks in (2, 4, 8, 16, 32, 64):
        assert terms.holds(ROWS, ranks)
        there, here = terms.at(ranks), terms.at(counts[0])
        assert [s + a - b for s, a, b in zip(sizes(counts[0]), there, here, strict=True)] == sizes(ranks), ranks
    assert not terms.holds(ROWS, 3)  # 1024 rows do not split in three: a second padded row count


def test_two_padded_row_counts_need_four_rank_counts() -> None:
    """LoRA's 4 rows beside granite-3.3's odd vocabulary (LoRA at its default rank over 8 ranks). granite-3.0's
    49155 rows cannot be told apart from LoRA's 4 by any powers of two (both pad alike from 4 ranks on, and
    differently only at 2), so that step is traced."""
    rows = (4, 1024, GRANITE_33)
    assert ranks_to_record(4, (4, 1024, VOCAB)) == [2]

    def lora(ranks: int) -> list[int]:
        adapter, vocab = ceil_div(4, ranks), ceil_div(GRANITE_33, ranks)
        return [9, 1024 * adapter + 8192 * vocab, ranks * (1024 * adapter + 8192 * vocab), 64 * 1024 // ranks]

    counts = (4, *ranks_to_record(4, rows))
    assert len(counts) == 4
    terms = fitted([lora(r) for r in counts], counts, rows)
    assert terms is not None and terms.padded == (4, GRANITE_33)
    for ranks in (2, 4, 8, 16, 32, 64):
        there, here = terms.at(ranks), terms.at(counts[0])
        assert [s + a - b for s, a, b in zip(lora(counts[0]), there, here, strict=True)] == lora(ranks), ranks
    assert fitted([lora(r) for r in counts[:3]], counts[:3], rows) is None  # three rank counts cannot say


def test_even_rows_need_two_rank_counts() -> None:
    rows = (1024, 4096)

    def even(ranks: int) -> list[int]:
        return [5, 512 * 4096 // ranks, 512 * 4096]

    terms = fitted([even(4), even(2)], (4, 2), rows)
    assert terms == RankTerms([0, 512 * 4096, 0])
    assert terms.holds(rows, 64) and not terms.holds(rows, 3)


def test_sizes_of_neither_form_or_of_both_have_no_terms() -> None:
    counts = (4, 2, 8)
    off = [[s + (1 if r == 8 and i == 2 else 0) for i, s in enumerate(sizes(r))] for r in counts]
    assert fitted(off, counts, ROWS) is None  # a byte off its form
    assert fitted([sizes(r) for r in counts[:2]], counts[:2], ROWS) is None  # padded, but only two rank counts
    assert fitted([[1], [2], [3]], counts, (3, 5)) is None  # two row counts that do not split: four rank counts
    assert fitted([[1]] * 5, (2, 3, 5, 7, 11), (6, 10, 15)) is None  # three: more than MOST_PADDED
    assert fitted([[1], [1]], (4, 4), ROWS) is None  # one rank count twice
    # 8 + 8 x ceil(4 / R) bytes (shards of LoRA's 4 rows) is also 4 + 32 / R + R x ceil(4 / R) at 4, 2 and 8 ranks
    # (wholes): the two part at 16 ranks, so neither is taken
    assert fitted([[16], [24], [16]], (4, 2, 8), (4, 1024)) is None


def test_the_rank_counts_a_family_is_recorded_at() -> None:
    assert [other_ranks(r) for r in (2, 3, 4, 8, 6)] == [4, 6, 2, 4, 3]
    assert ranks_to_record(4, (1024, 4096)) == [2]  # every row splits: two suffice
    assert ranks_to_record(4, (1024, VOCAB)) == [2, 8]
    assert ranks_to_record(8, (4, 1024)) == [4, 2]  # LoRA's rank 4 over 8 ranks pads
    assert ranks_to_record(4, (4, 1024)) == [2, 8]  # and over 8, doubled GPUs
    assert ranks_to_record(2, (1024, VOCAB)) == [4, 8]
    assert ranks_to_record(6, (1024, 4096, VOCAB)) == [3]  # several row counts pad: its own rank count only
    # granite-3.3's 49159 rows pad to 49160 over 2, 4 and 8 ranks alike: 16 tells what padding adds
    assert not solvable([GRANITE_33], (4, 2, 8)) and solvable([GRANITE_33], (4, 2, 16))
    assert ranks_to_record(4, (1024, GRANITE_33)) == [2, 16]
    assert ranks_to_record(8, (1024, GRANITE_33)) == [4, 16]
    assert ranks_to_record(4, (4, 1024, GRANITE_33)) == [2, 8, 16]  # two padded row counts: two more
