"""Deterministic generators for the artificial benchmark datasets.

Every catalog ``dataset_id`` has its generator parameters in the catalog, which the plan carries
(``plan.dataset.generator``: the trainer reads no catalog). :func:`generate_dataset` writes a dataset
once into a data directory under a content-keyed file name and reuses an existing file; a file already
at seed 002's place (e.g. made by ado) is used as is (:func:`resolve_dataset_file`). The rows follow
ado-sfttrainer's published formats, so a file made by either tool trains in the other.

This module holds the catalog parameters, the text rows and the file API; the words all rows are
made of are in :mod:`.words`, the vision rows and their JPEG in :mod:`.vision` (what callers use of
those two, e.g. :func:`make_jpeg`, is re-exported here).

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/datasets/__init__.py".
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ftbench.contracts.plan import DatasetGenerator
from ftbench_trainer.datasets.errors import DatasetError
from ftbench_trainer.datasets.vision import OUTER_RADIUS as OUTER_RADIUS
from ftbench_trainer.datasets.vision import VISION_QUESTION_WORDS as VISION_QUESTION_WORDS
from ftbench_trainer.datasets.vision import make_jpeg as make_jpeg
from ftbench_trainer.datasets.vision import write_vision
from ftbench_trainer.datasets.words import seeded_rng, text_of_chars, word_count
from ftbench_trainer.datasets.words import sentences as sentences

GENERATOR_VERSION = 3  # 2: ado's row formats; 3: vision images are JPEG (as ado's), not PNG


EXTENSIONS = {"chars": ".jsonl", "tokens": ".jsonl", "vision": ".parquet"}

INPUT_HEADER = "### Input:\n"
RESPONSE_HEADER = "\n\n### Response:"
#: ado's news-chars template (preprocess_news_dataset.py): preamble, input, response after a space.
PREAMBLE = "Write a response that appropriately completes the remainder of the following input text.\n\n"
#: The fixed part of a news-chars row: PREAMBLE + INPUT_HEADER + RESPONSE_HEADER + " ".
PROMPT_CHARS = len(PREAMBLE) + len(INPUT_HEADER) + len(RESPONSE_HEADER) + 1
#: news-tokens rows: 1024-character pieces, the response R copies joined by ". " (ado: R = 100).
TOKENS_PIECE_CHARS = 1024
TOKENS_COPIES_PER_16K = 100
# ---------------------------------------------------------------------------------- parameters


def dataset_params(
    dataset_id: str, generator: DatasetGenerator, *, entries: int | None = None, min_tokens: int | None = None
) -> dict:
    """The effective generator parameters of ``dataset_id`` (the plan's generator) with the overrides applied."""
    params = generator.params()
    if entries is not None:
        if entries < 1:
            raise DatasetError(f"entries must be >= 1, got {entries}")
        params["entries"] = int(entries)
    if min_tokens is not None:
        if params["kind"] == "chars":
            raise DatasetError(f"{dataset_id} is sized in characters; min_tokens does not apply")
        if min_tokens < 1:
            raise DatasetError(f"min_tokens must be >= 1, got {min_tokens}")
        params["min_tokens"] = int(min_tokens)
    return params


def content_key(dataset_id: str, params: dict, seed: int) -> str:
    blob = json.dumps(
        {
            "generator_version": GENERATOR_VERSION,
            "dataset_id": dataset_id,
            "params": params,
            "seed": seed,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dataset_filename(dataset_id: str, key: str, kind: str) -> str:
    return f"{dataset_id}-{key}{EXTENSIONS[kind]}"


# ---------------------------------------------------------------------------------- text rows


def iter_chars_rows(dataset_id: str, params: dict, seed: int) -> Iterator[dict]:
    n = params["chars"]
    for i in range(params["entries"]):
        rng = seeded_rng(dataset_id, seed, i)
        prompt_text = text_of_chars(rng, n)
        response = text_of_chars(rng, n)
        yield {"output": f"{PREAMBLE}{INPUT_HEADER}{prompt_text}{RESPONSE_HEADER} {response}"}


def tokens_copies(min_tokens: int) -> int:
    """R, the copies of the response piece: ado's 100 at 16384 tokens, proportionally elsewhere."""
    return max(1, math.ceil(min_tokens * TOKENS_COPIES_PER_16K / 16384))


def iter_tokens_rows(dataset_id: str, params: dict, seed: int) -> Iterator[dict]:
    """ado's layout: a 1024-character input, the response R copies of one 1024-character text;
    copies are added until the ``output`` has >= min_tokens words (one file for every model)."""
    min_tokens = params["min_tokens"]
    for i in range(params["entries"]):
        rng = seeded_rng(dataset_id, seed, i)
        prompt_text = text_of_chars(rng, TOKENS_PIECE_CHARS)
        piece = text_of_chars(rng, TOKENS_PIECE_CHARS)
        head = f"{INPUT_HEADER}{prompt_text}{RESPONSE_HEADER} "
        copies = tokens_copies(min_tokens)
        missing = min_tokens - word_count(head) - copies * word_count(piece)
        if missing > 0:
            copies += math.ceil(missing / max(1, word_count(piece)))
        yield {"output": head + ". ".join([piece] * copies)}


def _write_jsonl(rows: Iterator[dict], fh) -> int:
    n = 0
    for row in rows:
        fh.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        n += 1
    return n


# ---------------------------------------------------------------------------------------- API


def write_dataset(
    dataset_id: str,
    generator: DatasetGenerator,
    path: str | os.PathLike,
    *,
    entries: int | None = None,
    min_tokens: int | None = None,
    seed: int = 0,
) -> Path:
    """Generate ``dataset_id`` into exactly ``path`` (atomically: temp file + ``os.replace``)."""
    params = dataset_params(dataset_id, generator, entries=entries, min_tokens=min_tokens)
    return _write(dataset_id, params, seed, Path(path))


def _write(dataset_id: str, params: dict, seed: int, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        kind = params["kind"]
        if kind == "vision":
            os.close(fd)
            write_vision(dataset_id, params, seed, tmp)
        else:
            rows = iter_chars_rows if kind == "chars" else iter_tokens_rows
            with os.fdopen(fd, "wb") as fh:
                _write_jsonl(rows(dataset_id, params, seed), fh)
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def dataset_path(
    dataset_id: str,
    generator: DatasetGenerator,
    out_dir: str | os.PathLike,
    *,
    entries: int | None = None,
    min_tokens: int | None = None,
    seed: int = 0,
) -> Path:
    """Where :func:`generate_dataset` puts (or finds) this dataset; generates nothing."""
    params = dataset_params(dataset_id, generator, entries=entries, min_tokens=min_tokens)
    return Path(out_dir) / dataset_filename(dataset_id, content_key(dataset_id, params, seed), generator.kind)


def generate_dataset(
    dataset_id: str,
    generator: DatasetGenerator,
    out_dir: str | os.PathLike,
    *,
    entries: int | None = None,
    seed: int = 0,
    min_tokens: int | None = None,
) -> Path:
    """Generate ``dataset_id`` into the data directory ``out_dir`` once; returns the file path.

    ``entries`` and ``min_tokens`` override the catalog sizes (tests); they go into the content
    key, the dataset id stays the catalog id. An existing file with the same content key is reused.
    """
    path = dataset_path(dataset_id, generator, out_dir, entries=entries, min_tokens=min_tokens, seed=seed)
    if path.is_file():
        return path
    return write_dataset(dataset_id, generator, path, entries=entries, min_tokens=min_tokens, seed=seed)


def seed_002_file(dataset_id: str, data_dir: str | os.PathLike) -> Path | None:
    """The file seed 002 (and ado) put in the data directory, ``<dataset_id>.jsonl`` or
    ``.parquet``, when one is there; either format is read (the trainer loads both)."""
    for ext in (".jsonl", ".parquet"):
        candidate = Path(data_dir) / f"{dataset_id}{ext}"
        if candidate.is_file():
            return candidate
    return None


def resolve_dataset_file(
    dataset_id: str, generator: DatasetGenerator | None, data_dir: str | os.PathLike, *, entries: int | None = None
) -> tuple[Path, bool]:
    """(the file to train on, whether it was generated now): seed 002's file when present, else
    ftbench's content-keyed file, generated when missing (from the plan's generator)."""
    existing = seed_002_file(dataset_id, data_dir)
    if existing is not None:
        return existing, False
    if generator is None:
        raise DatasetError(f"dataset {dataset_id} is not at {data_dir}/{dataset_id}.jsonl|parquet and the plan "
                           "has no generator for it")  # fmt: skip
    path = dataset_path(dataset_id, generator, data_dir, entries=entries)
    if path.is_file():
        return path, False
    return generate_dataset(dataset_id, generator, data_dir, entries=entries), True
