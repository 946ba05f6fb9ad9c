"""Exact per-batch token counts, taken from the CPU tensors the data collator already produced.

Why not transformers' `include_num_input_tokens_seen`: it gathers across processes every step
(a GPU sync per step) and counts either padded or non-padded tokens, not both. Why not count in
the collator alone: accelerate's data loader fetches one batch ahead (to detect the last batch),
so a collator-side count includes a batch that may never be trained. So the collator wrapper only
*records* each batch's counts in a FIFO, and a forward pre-hook on the model *commits* the oldest
record when the model actually consumes a batch. Batches reach the model in the order they were
collated (dataloader workers deliver in order), so the FIFO pairs each forward with its batch.
No tensor is touched on the accelerator: the hook is pure Python.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from ftbench_trainer.packing import isolation


@dataclass
class BatchCount:
    """Counts of one micro-batch as collated (per rank)."""

    samples: int = 0
    padded_tokens: int = 0
    non_padding_tokens: int = 0
    # sum over rows of (padded row length)^2: the attention term of the FLOP count needs it.
    padded_length_squared: int = 0
    # The largest micro-batch's input_ids shape (rows, padded length): what a step's tensor peak scales with.
    largest: tuple[int, int] = (0, 0)

    def add(self, other: BatchCount) -> None:
        self.largest = max(self.largest, other.largest, key=lambda shape: shape[0] * shape[1])
        self.samples += other.samples
        self.padded_tokens += other.padded_tokens
        self.non_padding_tokens += other.non_padding_tokens
        self.padded_length_squared += other.padded_length_squared


def count_batch(batch: Mapping[str, Any]) -> BatchCount:
    """Counts of a collated batch: `input_ids` gives the padded shape, `attention_mask` the real tokens.

    Padding-free/packed batches (trl's packing) have no 2D attention mask: every position is a real
    token (trl pads them only on Neuron), so padded == non-padding, and each sample starts where
    `position_ids` is 0: that many samples, and the attention term is the sum of the samples' squared
    lengths (each attends to itself only, ftbench_trainer.packing).
    """
    input_ids = batch["input_ids"]
    rows, length = (int(d) for d in input_ids.shape[:2]) if input_ids.dim() > 1 else (1, int(input_ids.shape[0]))
    padded, shape = rows * length, (rows, length)
    mask = batch.get("attention_mask")
    if mask is not None and mask.dim() == input_ids.dim():
        return BatchCount(samples=rows, padded_tokens=padded, non_padding_tokens=int(mask.sum()),
                          padded_length_squared=rows * length * length, largest=shape)  # fmt: skip
    position_ids = batch.get("position_ids")
    if position_ids is None:
        return BatchCount(samples=rows, padded_tokens=padded, non_padding_tokens=padded,
                          padded_length_squared=rows * length * length, largest=shape)  # fmt: skip
    starts = [i for i, p in enumerate(position_ids.reshape(-1).tolist()) if p == 0] + [padded]
    lengths = [b - a for a, b in pairwise(starts)]
    return BatchCount(samples=len(lengths), padded_tokens=padded, non_padding_tokens=padded,
                      padded_length_squared=sum(n * n for n in lengths), largest=shape)  # fmt: skip


class TokenCounter:
    """Pairs collated batches with model forwards; `committed` holds what the model really consumed."""

    def __init__(self) -> None:
        self._pending: deque[BatchCount] = deque()
        self.committed = BatchCount()
        self.uncounted_forwards = 0
        # How packed samples were kept apart (ftbench_trainer.packing), from the first packed batch.
        self.attention = ""
        self.packing = ""

    def wrap_collator(self, collate: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        if getattr(collate, "_ftbench_counter", None) is self:
            return collate

        def counting_collate(examples: list[Any]) -> Any:
            batch = collate(examples)
            self._pending.append(count_batch(batch))
            if not self.packing:
                self.packing = isolation(batch, self.attention) or ""
            return batch

        counting_collate._ftbench_counter = self  # type: ignore[attr-defined]
        return counting_collate

    def on_forward(self, *_: Any, **__: Any) -> None:
        """Forward pre-hook: the model is about to consume the oldest collated batch."""
        if self._pending:
            self.committed.add(self._pending.popleft())
        else:  # a forward without a collated batch (should not happen in training): make it visible
            self.uncounted_forwards += 1

    def attach(self, model: Any, dataloader: Any) -> list[Any]:
        """Wrap the dataloader's collate_fn and hook the model; returns the hook handles.

        Must run before the dataloader's iterator is created (Trainer's on_train_begin is).
        """
        # accelerate's DataLoaderShard/Dispatcher wrap the torch DataLoader (`base_dataloader`),
        # which reads collate_fn when its iterator is created: replacing it there is enough.
        base = getattr(dataloader, "base_dataloader", dataloader)
        base.collate_fn = self.wrap_collator(base.collate_fn)
        return [model.register_forward_pre_hook(self.on_forward, with_kwargs=True)]
