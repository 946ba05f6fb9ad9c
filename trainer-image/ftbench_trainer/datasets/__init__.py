"""Deterministic generators for the artificial benchmark datasets.

Every catalog ``dataset_id`` has an entry in :data:`DATASET_GENERATORS`. :func:`generate_dataset`
writes a dataset once into a data directory under a content-keyed file name
(``<dataset_id>-<key>.jsonl|parquet``; the key hashes the id, the effective parameters, the seed,
the tokenizer and :data:`GENERATOR_VERSION`), reuses an existing file, and is safe when several
processes generate the same file at once (each writes a temporary file in the same directory and
``os.replace``-s it into place; the content is deterministic, so the last writer wins harmlessly).

Text datasets are JSONL rows ``{"output": "### Input:\\n...\\n\\n### Response:..."}`` (train with
``--dataset_text_field output --response_template "\\n### Response:"``):

* ``news-chars-N-entries-E``: N characters of input + a 127-character prompt + N characters of
  response, i.e. ``len(output) == 2 * N + 127`` exactly.
* ``news-tokens-Tplus-entries-E``: a short input and a long response; every ``output`` has at
  least T tokens. With a tokenizer this is checked with that tokenizer while generating
  (``add_special_tokens=False``). Without one the output has at least T whitespace-separated
  words, a lower bound on the token count of any tokenizer that does not merge across spaces
  (Llama/Granite sentencepiece and byte-level BPE tokenizers).

Vision datasets are Parquet files in chat format with Hugging Face ``datasets`` feature metadata:
``messages`` (user: K image placeholders + a question; assistant: an answer) and ``images`` (K
copies of one generated PNG). K is chosen so that K * (width // 14) * (height // 14) >= T: each
image costs at least that many tokens in granite-vision-3.2-2b (SigLIP 384, patch 14; its any-res
tiling only adds more), so every entry has at least T tokens there.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

GENERATOR_VERSION = 1


def _generators_from_catalog() -> dict[str, dict[str, Any]]:
    """Generator parameters of every dataset, from the one catalog (ftbench/catalog/data/datasets.yaml)."""
    from ftbench.catalog import load_catalog

    kinds = {"text-chars": "chars", "text-tokens": "tokens", "vision": "vision"}
    generators: dict[str, dict[str, Any]] = {}
    for entry in load_catalog().datasets.values():
        params: dict[str, Any] = {"kind": kinds[entry.kind]}
        if entry.chars is not None:
            params["chars"] = entry.chars
        if entry.kind == "vision":
            params["width"], params["height"] = entry.image_width, entry.image_height
        if entry.min_tokens is not None:
            params["min_tokens"] = entry.min_tokens
        params["entries"] = entry.entries
        generators[entry.name] = params
    return generators


DATASET_GENERATORS: dict[str, dict[str, Any]] = _generators_from_catalog()

EXTENSIONS = {"chars": ".jsonl", "tokens": ".jsonl", "vision": ".parquet"}

INPUT_HEADER = "### Input:\n"
RESPONSE_HEADER = "\n\n### Response:"
INSTRUCTION = "Rewrite the following local news report in the same plain style, keeping each fact, name and number."
#: The fixed prompt part of a news-chars row: INPUT_HEADER + INSTRUCTION + "\n" + RESPONSE_HEADER.
PROMPT_CHARS = 127
assert len(INPUT_HEADER) + len(INSTRUCTION) + 1 + len(RESPONSE_HEADER) == PROMPT_CHARS

#: Lower bound on the tokens one image costs in granite-vision-3.2-2b (SigLIP patch size 14).
VISION_PATCH = 14

TokenCounter = Callable[[str], int]


class DatasetError(ValueError):
    """Unknown dataset id or invalid parameters."""


# --------------------------------------------------------------------------------------- words


@lru_cache(maxsize=1)
def sentences() -> tuple[str, ...]:
    """The package's synthetic English sentences (``ftbench_trainer/data/words.txt``)."""
    text = resources.files("ftbench_trainer").joinpath("data/words.txt").read_text(encoding="utf-8")
    return tuple(s for s in text.splitlines() if s and not s.startswith("#"))


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


def _text_of_chars(rng: random.Random, n: int) -> str:
    sents = sentences()
    out: list[str] = []
    size = -1
    while size < n:
        s = rng.choice(sents)
        out.append(s)
        size += len(s) + 1
    return " ".join(out)[:n]


# ----------------------------------------------------------------------------------- tokenizers


def _word_count(text: str) -> int:
    return len(text.split())


def resolve_tokenizer(tokenizer: Any) -> tuple[TokenCounter, str]:
    """Returns ``(count_tokens, fingerprint)`` for a tokenizer directory/object (or None: words)."""
    if tokenizer is None:
        return _word_count, "whitespace-words"
    from tokenizers import Tokenizer

    raw: Tokenizer | None = None
    if isinstance(tokenizer, str | os.PathLike):
        p = Path(tokenizer)
        if p.is_file() and p.suffix == ".json":
            raw = Tokenizer.from_file(str(p))
        elif (p / "tokenizer.json").is_file():
            raw = Tokenizer.from_file(str(p / "tokenizer.json"))
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(p))
    if raw is None:
        if isinstance(tokenizer, Tokenizer):
            raw = Tokenizer.from_str(tokenizer.to_str())
        elif getattr(tokenizer, "backend_tokenizer", None) is not None:
            raw = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    if raw is not None:
        raw.no_truncation()
        raw.no_padding()
        serialized = raw.to_str()
        fingerprint = "tokenizers:" + hashlib.sha256(serialized.encode()).hexdigest()

        def count(text: str) -> int:
            return len(raw.encode(text, add_special_tokens=False).ids)

        return count, fingerprint
    # A slow (python) tokenizer.
    hf = tokenizer
    ident = json.dumps([type(hf).__name__, getattr(hf, "name_or_path", ""), len(hf)], sort_keys=True)

    def count_slow(text: str) -> int:
        return len(hf(text, add_special_tokens=False)["input_ids"])

    return count_slow, "slow:" + hashlib.sha256(ident.encode()).hexdigest()


# ---------------------------------------------------------------------------------- parameters


def dataset_params(dataset_id: str, *, entries: int | None = None, min_tokens: int | None = None) -> dict:
    """The effective generator parameters of ``dataset_id`` with the overrides applied."""
    try:
        params = dict(DATASET_GENERATORS[dataset_id])
    except KeyError:
        known = ", ".join(sorted(DATASET_GENERATORS))
        raise DatasetError(f"unknown dataset_id {dataset_id!r}; known: {known}") from None
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


def content_key(dataset_id: str, params: dict, seed: int, tokenizer_fingerprint: str | None) -> str:
    blob = json.dumps(
        {
            "generator_version": GENERATOR_VERSION,
            "dataset_id": dataset_id,
            "params": params,
            "seed": seed,
            "tokenizer": tokenizer_fingerprint,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dataset_filename(dataset_id: str, key: str) -> str:
    return f"{dataset_id}-{key}{EXTENSIONS[DATASET_GENERATORS[dataset_id]['kind']]}"


# ---------------------------------------------------------------------------------- text rows


def iter_chars_rows(dataset_id: str, params: dict, seed: int) -> Iterator[dict]:
    n = params["chars"]
    for i in range(params["entries"]):
        rng = _rng(dataset_id, seed, i)
        prompt_text = _text_of_chars(rng, n)
        response = _text_of_chars(rng, n)
        yield {"output": f"{INPUT_HEADER}{INSTRUCTION}\n{prompt_text}{RESPONSE_HEADER}{response}"}


def iter_tokens_rows(dataset_id: str, params: dict, seed: int, count: TokenCounter) -> Iterator[dict]:
    """Rows with a short input and a long response; each whole ``output`` has >= min_tokens."""
    min_tokens = params["min_tokens"]
    sents = sentences()
    chars_per_token = 2.5  # first guess, refined from every measured entry
    for i in range(params["entries"]):
        rng = _rng(dataset_id, seed, i)
        prompt_text = " ".join(rng.choice(sents) for _ in range(3))
        head = f"{INPUT_HEADER}{INSTRUCTION}\n{prompt_text}{RESPONSE_HEADER}"
        parts: list[str] = []
        size = 0
        target = int(min_tokens * chars_per_token * 1.02) + 64
        while True:
            while size < target:
                s = rng.choice(sents)
                parts.append(s)
                size += len(s) + 1
            text = head + " ".join(parts)
            n = count(text)
            if n >= min_tokens:
                break
            if n == 0:
                raise DatasetError("the tokenizer returned no tokens for a non-empty text")
            chars_per_token = len(text) / n
            target = size + int((min_tokens - n) * chars_per_token * 1.05) + 64
        chars_per_token = len(text) / n
        yield {"output": text}


def _write_jsonl(rows: Iterator[dict], fh) -> int:
    n = 0
    for row in rows:
        fh.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        n += 1
    return n


# -------------------------------------------------------------------------------------- vision


def make_png(width: int, height: int, seed: int = 0) -> bytes:
    """A deterministic RGB PNG (a grid of coloured blocks), encoded without PIL."""
    rng = _rng("image", width, height, seed)
    block = 48
    cols = math.ceil(width / block)
    colours = [
        [bytes((rng.randrange(256), rng.randrange(256), rng.randrange(256))) for _ in range(cols)]
        for _ in range(math.ceil(height / block))
    ]
    raw = bytearray()
    for y in range(height):
        row = b"".join(colours[y // block][x // block] * block for x in range(0, width, block))
        raw += b"\x00" + row[: width * 3]

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")
    )


def images_per_entry(params: dict) -> int:
    per_image = (params["width"] // VISION_PATCH) * (params["height"] // VISION_PATCH)
    return max(1, math.ceil(params["min_tokens"] / per_image))


_VISION_FEATURES = {
    "info": {
        "features": {
            "messages": {
                "feature": {
                    "role": {"dtype": "string", "_type": "Value"},
                    "content": {
                        "feature": {
                            "type": {"dtype": "string", "_type": "Value"},
                            "text": {"dtype": "string", "_type": "Value"},
                        },
                        "_type": "List",
                    },
                },
                "_type": "List",
            },
            "images": {"feature": {"_type": "Image"}, "_type": "List"},
        }
    }
}

VISION_QUESTIONS = (
    "Describe the images.",
    "What do these pictures show?",
    "Write a short news caption for these images.",
    "Summarize what is visible in the images.",
)


def _write_vision(dataset_id: str, params: dict, seed: int, path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - pyarrow comes with `datasets`
        raise DatasetError("vision datasets need pyarrow (install the trainer extra)") from e

    content_t = pa.list_(pa.struct([("type", pa.string()), ("text", pa.string())]))
    schema = pa.schema(
        [
            ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", content_t)]))),
            ("images", pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))),
        ],
        metadata={"huggingface": json.dumps(_VISION_FEATURES)},
    )
    png = make_png(params["width"], params["height"], seed)
    k = images_per_entry(params)
    images = [{"bytes": png, "path": None}] * k
    image_parts = [{"type": "image", "text": None}] * k
    sents = sentences()
    batch_rows = 64
    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=True) as writer:
        for start in range(0, params["entries"], batch_rows):
            messages = []
            for i in range(start, min(start + batch_rows, params["entries"])):
                rng = _rng(dataset_id, seed, i)
                question = rng.choice(VISION_QUESTIONS)
                answer = " ".join(rng.choice(sents) for _ in range(2))
                messages.append(
                    [
                        {"role": "user", "content": [*image_parts, {"type": "text", "text": question}]},
                        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
                    ]
                )
            table = pa.table({"messages": messages, "images": [images] * len(messages)}, schema=schema)
            writer.write_table(table, row_group_size=batch_rows)
            n += len(messages)
    return n


# ---------------------------------------------------------------------------------------- API


def write_dataset(
    dataset_id: str,
    path: str | os.PathLike,
    *,
    tokenizer: Any = None,
    entries: int | None = None,
    min_tokens: int | None = None,
    seed: int = 0,
) -> Path:
    """Generate ``dataset_id`` into exactly ``path`` (atomically: temp file + ``os.replace``)."""
    params = dataset_params(dataset_id, entries=entries, min_tokens=min_tokens)
    count, _ = resolve_tokenizer(tokenizer) if params["kind"] == "tokens" else (None, None)
    return _write(dataset_id, params, seed, count, Path(path))


def _write(dataset_id: str, params: dict, seed: int, count: TokenCounter | None, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        kind = params["kind"]
        if kind == "vision":
            os.close(fd)
            _write_vision(dataset_id, params, seed, tmp)
        else:
            with os.fdopen(fd, "wb") as fh:
                if kind == "chars":
                    _write_jsonl(iter_chars_rows(dataset_id, params, seed), fh)
                else:
                    assert count is not None
                    _write_jsonl(iter_tokens_rows(dataset_id, params, seed, count), fh)
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def dataset_path(
    dataset_id: str,
    out_dir: str | os.PathLike,
    *,
    tokenizer: Any = None,
    entries: int | None = None,
    min_tokens: int | None = None,
    seed: int = 0,
) -> Path:
    """Where :func:`generate_dataset` puts (or finds) this dataset; generates nothing."""
    params = dataset_params(dataset_id, entries=entries, min_tokens=min_tokens)
    fingerprint = resolve_tokenizer(tokenizer)[1] if params["kind"] == "tokens" else None
    return Path(out_dir) / dataset_filename(dataset_id, content_key(dataset_id, params, seed, fingerprint))


def generate_dataset(
    dataset_id: str,
    out_dir: str | os.PathLike,
    *,
    tokenizer: Any = None,
    entries: int | None = None,
    seed: int = 0,
    min_tokens: int | None = None,
) -> Path:
    """Generate ``dataset_id`` into the data directory ``out_dir`` once; returns the file path.

    ``tokenizer`` (a directory, a ``tokenizer.json``, a transformers or ``tokenizers`` tokenizer)
    is only used by the ``news-tokens-*`` sets to guarantee their token counts. ``entries`` and
    ``min_tokens`` override the catalog sizes (tests); they go into the content key, the dataset
    id stays the catalog id. An existing file with the same content key is reused.
    """
    params = dataset_params(dataset_id, entries=entries, min_tokens=min_tokens)
    count: TokenCounter | None = None
    fingerprint: str | None = None
    if params["kind"] == "tokens":
        count, fingerprint = resolve_tokenizer(tokenizer)
    path = Path(out_dir) / dataset_filename(dataset_id, content_key(dataset_id, params, seed, fingerprint))
    if path.is_file():
        return path
    return _write(dataset_id, params, seed, count, path)
