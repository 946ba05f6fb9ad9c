"""Which rows of the dataset train: counted before the first step by the engine's own collator.

A row whose prompt fills `modelMaxLength` keeps no response token after truncation. trl 1.x drops
such rows before training ("Dropping fully masked examples"), so an epoch is shorter than the
dataset; fms-hf-tuning's completion-only collator keeps them with every label ignored, so they cost
a forward and a backward pass and teach nothing (docs/measurements.md, "Rows whose response is cut
away"). Neither says how many. Here the engine's prepared training set goes through the engine's
own data collator, a chunk of rows at a time, and a row counts as trained when one of its labels is
not ignored (-100): the same code and tokens the run's batches come from, so the count is exact for
both engines and for packed rows (a packed row holds several samples, each counted apart).

A run whose trained rows cannot fill one optimizer step is refused here, before any step, with the
counts and the fix (`TooFewTrainedRowsError`): the alternative is trl's "num_samples=0" traceback or
an fms-hf-tuning run that trains on nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from ftbench.contracts.results import REASON_TOO_FEW_TRAINED_ROWS

IGNORED = -100  # transformers' ignore_index: a label the loss skips
CHUNK = 256  # rows collated at a time: bounded memory for long rows


class TooFewTrainedRowsError(RuntimeError):
    """The training set's rows with a trained token cannot fill one optimizer step."""

    reason = REASON_TOO_FEW_TRAINED_ROWS


def dataset_rows(path: str | Path) -> int | None:
    """Rows of the dataset file (jsonl: non-empty lines); None where it is not a file ftbench counts."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".json"):
        return None
    with path.open() as fh:
        return sum(1 for line in fh if line.strip())


def _trained_in(batch: Any) -> int:
    """Samples of one collated batch with at least one label that is not ignored (padded rows as
    `measure.tokens.count_batch` tells them from packed ones: by the 2D attention mask)."""
    labels, mask, position_ids = batch["labels"], batch.get("attention_mask"), batch.get("position_ids")
    rows = labels.reshape(1, -1) if labels.dim() == 1 else labels
    if position_ids is None or (mask is not None and mask.dim() == batch["input_ids"].dim()):
        return int((rows != IGNORED).any(dim=-1).sum())
    # Packed: one row of several samples, each starting where position_ids is 0.
    flat, positions = rows.reshape(-1).tolist(), position_ids.reshape(-1).tolist()
    starts = [i for i, p in enumerate(positions) if p == 0] + [len(flat)]
    return sum(any(label != IGNORED for label in flat[a:b]) for a, b in pairwise(starts))


def trained_rows(dataset: Sequence[Any], collate: Callable[[list[Any]], Any]) -> int:
    """Rows (samples) of `dataset` that keep a trained token once `collate` has truncated and masked them."""
    trained = 0
    for start in range(0, len(dataset), CHUNK):
        batch = collate([dataset[i] for i in range(start, min(start + CHUNK, len(dataset)))])
        trained += _trained_in(batch)
    return trained


def training_set(dataloader: Any) -> tuple[Sequence[Any], Callable[[list[Any]], Any]]:
    """The engine's training set and collator behind an (accelerate-wrapped) train dataloader."""
    base = getattr(dataloader, "base_dataloader", dataloader)
    return base.dataset, base.collate_fn


def check_one_step(trained: int, needed: int, *, offered: int | None, max_length: int, dataset_id: str) -> None:
    """Raise when `trained` rows cannot fill one optimizer step of `needed` samples."""
    if trained >= needed:
        return
    of = f" of its {offered}" if offered is not None else ""
    raise TooFewTrainedRowsError(
        f"dataset {dataset_id}: {trained}{of} rows keep a trained token at modelMaxLength {max_length} (the others' "
        f"prompts fill it, so truncation cuts their whole response away), but one optimizer step takes {needed} "
        "samples (batchSize x gradientAccumulationSteps); raise modelMaxLength, or use a dataset with shorter prompts"
    )
