"""Seed 001 note 3: dataset tokens of an entry = min(len(tokens(output)), tokenizer.model_max_length,
max_seq_length).

`dataset_tokens_per_second` = samples processed x the mean of that value over the dataset's
entries / train_runtime. The mean is exact for whole epochs and for every dataset whose entries
all exceed the cap (the news-tokens sets); for the news-chars sets entries differ by a few tokens,
so a partial epoch carries that (small, documented) sampling error.

Tokenising a 16k-token entry only to cap it at, say, 2048 would be wasteful: a prefix is
tokenised first, and the whole entry only when the prefix does not already reach the cap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# A token is at most this many characters in any tokenizer we meet (a generous bound).
_CHARS_PER_TOKEN_BOUND = 16


def entry_tokens(text: str, tokenizer: Any, cap: int) -> int:
    prefix = text[: (cap + 2) * _CHARS_PER_TOKEN_BOUND]
    n = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    if n < cap + 2 and len(prefix) < len(text):
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return min(n, cap)


def _text(value: Any, field: str) -> str:
    """The entry's text; chat rows (a list of messages, the vision sets') have none to count, and
    counting the tokens of their Python repr would pass an estimate off as a measurement."""
    if not isinstance(value, str):
        raise TypeError(f"{field!r} holds {type(value).__name__}, not text (seed note 3 counts text rows)")
    return value


def read_texts(path: str | Path, field: str) -> Iterable[str]:
    path = Path(path)
    if path.suffix == ".jsonl" or path.suffix == ".json":
        with path.open() as fh:
            for line in fh:
                if line.strip():
                    yield _text(json.loads(line)[field], field)
        return
    from datasets import load_dataset

    fmt = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}.get(path.suffix, "json")
    yield from (_text(t, field) for t in load_dataset(fmt, data_files=str(path), split="train")[field])


def mean_dataset_tokens(path: str | Path, field: str, tokenizer: Any, max_seq_length: int) -> float:
    """Mean over entries of min(len(tokens(entry[field])), tokenizer.model_max_length, max_seq_length)."""
    cap = min(int(getattr(tokenizer, "model_max_length", max_seq_length) or max_seq_length), max_seq_length)
    values = [entry_tokens(t, tokenizer, cap) for t in read_texts(path, field)]
    return sum(values) / len(values) if values else 0.0
