"""The deterministic artificial dataset generators (ftbench_trainer.datasets)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ftbench.catalog import load_catalog
from ftbench.contracts.plan import DatasetGenerator
from ftbench_trainer.datasets import (
    GENERATOR_VERSION,
    INPUT_HEADER,
    OUTER_RADIUS,
    PREAMBLE,
    PROMPT_CHARS,
    RESPONSE_HEADER,
    TOKENS_PIECE_CHARS,
    VISION_QUESTION_WORDS,
    DatasetError,
    content_key,
    dataset_params,
    dataset_path,
    generate_dataset,
    make_jpeg,
    resolve_dataset_file,
    sentences,
    tokens_copies,
    write_dataset,
)

CATALOG_IDS = set(load_catalog().datasets)


def gen(dataset_id: str) -> DatasetGenerator:
    """The catalog's generator of a dataset, as a plan carries it (the trainer reads no catalog)."""
    return load_catalog().datasets[dataset_id].generator()


CLI = [sys.executable, "-m", "ftbench_trainer.datasets"]


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]


# ------------------------------------------------------------------------------------ registry


def test_every_catalog_dataset_has_its_generator() -> None:
    for dataset_id in CATALOG_IDS:
        params = gen(dataset_id).params()
        assert params["entries"] == int(dataset_id.rsplit("-", 1)[1])
        if params["kind"] == "chars":
            assert f"-{params['chars']}-" in dataset_id
        else:
            assert params["min_tokens"] >= 16384
    assert gen("news-tokens-128kplus-entries-320").min_tokens == 128 * 1024


def test_word_source_is_shipped() -> None:
    sents = sentences()
    assert len(sents) >= 2000
    assert len({w for s in sents for w in s.split()}) >= 300
    assert all(s.isascii() and "\n" not in s for s in sents)


def test_bad_overrides_and_no_generator() -> None:
    with pytest.raises(DatasetError, match="the plan has no generator"):
        resolve_dataset_file("news-chars-9-entries-1", None, Path("/nonexistent"))
    with pytest.raises(DatasetError):
        dataset_params("news-chars-512-entries-4096", gen("news-chars-512-entries-4096"), entries=0)
    with pytest.raises(DatasetError):
        dataset_params("news-chars-512-entries-4096", gen("news-chars-512-entries-4096"), min_tokens=10)


def test_content_key_changes_with_parameters(tmp_path: Path) -> None:
    ident = "news-chars-512-entries-4096"
    base = dataset_path(ident, gen(ident), tmp_path)
    assert base.name.startswith(ident + "-") and base.suffix == ".jsonl"
    assert dataset_path(ident, gen(ident), tmp_path) == base
    assert dataset_path(ident, gen(ident), tmp_path, entries=4096) == base  # the catalog size is the default
    others = {
        dataset_path(ident, gen(ident), tmp_path, entries=8),
        dataset_path(ident, gen(ident), tmp_path, seed=1),
        dataset_path("news-chars-1024-entries-4096", gen("news-chars-1024-entries-4096"), tmp_path),
    }
    assert base not in others and len(others) == 3
    tokens = "news-tokens-16384plus-entries-4096"
    assert dataset_path(tokens, gen(tokens), tmp_path) != dataset_path(tokens, gen(tokens), tmp_path, min_tokens=100)
    params = dataset_params(ident, gen(ident))
    assert content_key(ident, params, 0) != content_key(ident, params, 1)
    assert str(GENERATOR_VERSION)  # part of the key, bump it when the output changes


# -------------------------------------------------------------------------------- chars sets


@pytest.mark.parametrize("n", [512, 1024, 2048])
def test_chars_sizes_and_format(n: int, tmp_path: Path) -> None:
    ident = f"news-chars-{n}-entries-4096"
    path = generate_dataset(ident, gen(ident), tmp_path, entries=16)
    rows = read_rows(path)
    assert len(rows) == 16
    for row in rows:
        assert list(row) == ["output"]
        text = row["output"]
        # ado's template (preprocess_news_dataset.py): preamble, input, a space after "### Response:"
        assert len(text) == n + PROMPT_CHARS + n and PROMPT_CHARS == 117
        assert text.startswith(PREAMBLE + INPUT_HEADER) and text.count(RESPONSE_HEADER) == 1
        head, response = text.split(RESPONSE_HEADER + " ")
        assert len(response) == n
        assert len(head) == len(PREAMBLE + INPUT_HEADER) + n
    assert len({r["output"] for r in rows}) == 16
    assert no_temp_files(tmp_path)


def test_full_size_chars_set(tmp_path: Path) -> None:
    path = generate_dataset("news-chars-512-entries-4096", gen("news-chars-512-entries-4096"), tmp_path)
    rows = read_rows(path)
    assert len(rows) == 4096
    assert {len(r["output"]) for r in rows} == {2 * 512 + PROMPT_CHARS}


def test_deterministic(tmp_path: Path) -> None:
    ident = "news-chars-1024-entries-4096"
    a = generate_dataset(ident, gen(ident), tmp_path / "a", entries=32)
    b = generate_dataset(ident, gen(ident), tmp_path / "b", entries=32)
    assert a.name == b.name and a.read_bytes() == b.read_bytes()
    c = generate_dataset(ident, gen(ident), tmp_path / "c", entries=32, seed=7)
    assert c.name != a.name and c.read_bytes() != a.read_bytes()
    # fewer entries are a prefix of more entries (entries are generated independently)
    d = generate_dataset(ident, gen(ident), tmp_path / "d", entries=8)
    assert a.read_bytes().startswith(d.read_bytes())


def test_existing_file_is_reused(tmp_path: Path) -> None:
    ident = "news-chars-512-entries-4096"
    path = generate_dataset(ident, gen(ident), tmp_path, entries=4)
    path.write_text('{"output": "sentinel"}\n')
    assert generate_dataset(ident, gen(ident), tmp_path, entries=4) == path
    assert path.read_text() == '{"output": "sentinel"}\n'


def test_concurrent_threads_one_valid_file(tmp_path: Path) -> None:
    ident = "news-chars-2048-entries-4096"
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: generate_dataset(ident, gen(ident), tmp_path, entries=300), range(4)))
    assert len(set(paths)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [paths[0].name]
    assert len(read_rows(paths[0])) == 300


def test_concurrent_processes_one_valid_file(tmp_path: Path) -> None:
    ident = "news-chars-2048-entries-4096"
    cmd = [*CLI, "generate", ident, "--generator", gen(ident).model_dump_json(), "-o", str(tmp_path)]
    procs = [
        subprocess.Popen([*cmd, "--entries", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    printed = {o.strip() for o, _ in outs}
    assert len(printed) == 1
    path = Path(printed.pop())
    assert list(tmp_path.iterdir()) == [path]
    rows = read_rows(path)
    assert len(rows) == 2000 and {len(r["output"]) for r in rows} == {2 * 2048 + PROMPT_CHARS}
    assert path.read_bytes() == generate_dataset(ident, gen(ident), tmp_path / "serial", entries=2000).read_bytes()


def test_cli_exact_output_file(tmp_path: Path) -> None:
    """The generators' own command line takes the generator from its caller (the trainer reads no catalog)."""
    target = tmp_path / "sub" / "news-chars-512-entries-4096.jsonl"
    generator = gen("news-chars-512-entries-4096").model_dump_json()
    run = subprocess.run(
        [
            *CLI,
            "generate",
            "news-chars-512-entries-4096",
            "--generator",
            generator,
            "-o",
            str(target),
            "--entries",
            "5",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == str(target)
    assert len(read_rows(target)) == 5
    bad = subprocess.run(
        [*CLI, "generate", "x", "--generator", '{"kind": "paper"}', "-o", str(tmp_path)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "not a dataset generator" in bad.stderr


# ------------------------------------------------------------------------------- token sets


def test_tokens_rows_follow_ados_layout(tmp_path: Path) -> None:
    """ado's generate_16384plus_dataset: a 1024-char input, the response 100 copies joined by ". "."""
    path = generate_dataset(
        "news-tokens-16384plus-entries-4096", gen("news-tokens-16384plus-entries-4096"), tmp_path, entries=3
    )
    rows = read_rows(path)
    assert len(rows) == 3
    for row in rows:
        text = row["output"]
        assert text.startswith(INPUT_HEADER) and text.count(RESPONSE_HEADER) == 1
        head, response = text.split(RESPONSE_HEADER + " ")
        assert len(head) == len(INPUT_HEADER) + TOKENS_PIECE_CHARS
        piece = response[:TOKENS_PIECE_CHARS]
        copies = (len(response) + 2) // (TOKENS_PIECE_CHARS + 2)
        assert response == ". ".join([piece] * copies)
        assert copies >= tokens_copies(16384) == 100
        assert len(text.split()) >= 16384


def test_tokens_word_lower_bound_for_small_targets(tmp_path: Path) -> None:
    path = generate_dataset(
        "news-tokens-16384plus-entries-4096",
        gen("news-tokens-16384plus-entries-4096"),
        tmp_path,
        entries=3,
        min_tokens=2000,
    )
    for row in read_rows(path):
        assert 2000 <= len(row["output"].split()) < 2000 * 1.3


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_dir: Path):
    pytest.importorskip("tokenizers")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_one_tokens_file_for_every_model(tiny_tokenizer, tmp_path: Path) -> None:
    """As ado's: the file does not depend on a tokenizer, and a real one counts >= T tokens."""
    path = generate_dataset(
        "news-tokens-16384plus-entries-4096", gen("news-tokens-16384plus-entries-4096"), tmp_path, entries=2
    )
    assert path == dataset_path(
        "news-tokens-16384plus-entries-4096", gen("news-tokens-16384plus-entries-4096"), tmp_path, entries=2
    )
    counts = [n_tokens(tiny_tokenizer, r["output"]) for r in read_rows(path)]
    assert all(c >= 16384 for c in counts), counts


def test_tokens_guarantee_128k(tiny_tokenizer, tmp_path: Path) -> None:
    path = generate_dataset(
        "news-tokens-128kplus-entries-320", gen("news-tokens-128kplus-entries-320"), tmp_path, entries=1
    )
    (row,) = read_rows(path)
    assert n_tokens(tiny_tokenizer, row["output"]) >= 131072
    assert row["output"].count(". ") >= tokens_copies(131072) - 1


# ------------------------------------------------------------------------------- vision sets


def jpeg_image(data: bytes):  # -> PIL.Image.Image, decoded
    image_module = pytest.importorskip("PIL.Image", reason="vision datasets need pillow (the trainer extra)")
    image = image_module.open(io.BytesIO(data))
    image.load()
    return image


def test_jpeg_is_ados_kind_of_picture() -> None:
    """A white canvas with two concentric filled circles, as ado draws, encoded as JPEG."""
    pytest.importorskip("PIL")
    image = jpeg_image(make_jpeg(384, 768))
    assert (image.format, image.size, image.mode) == ("JPEG", (384, 768), "RGB")
    radius = OUTER_RADIUS * 384
    outer = image.getpixel((192, round(384 - 0.75 * radius)))  # between the two circles
    inner = image.getpixel((192, 384))
    for corner in [(0, 0), (383, 0), (0, 767), (383, 767), (192, round(384 - 1.1 * radius))]:
        assert min(image.getpixel(corner)) >= 245, corner  # white (JPEG is lossy: close, not exact)
    assert max(outer) < 215 and max(inner) < 215  # colours are never near-white
    assert sum(abs(a - b) for a, b in zip(outer, inner, strict=True)) > 0


def test_jpeg_bytes_are_deterministic_per_size_and_seed() -> None:
    pytest.importorskip("PIL")
    first = make_jpeg(384, 384, seed=0)
    assert make_jpeg(384, 384, seed=0) == first
    assert make_jpeg(384, 384, seed=1) != first
    assert make_jpeg(384, 768, seed=0) != first
    with pytest.raises(DatasetError, match="positive"):
        make_jpeg(0, 384)


@pytest.mark.parametrize(("width", "height"), [(384, 384), (384, 768)])
def test_vision_parquet_has_ados_columns(width: int, height: int, tmp_path: Path) -> None:
    """ado's generate_vision_dataset: one image per row, the chat in `output`, ~20k-token answers."""
    pq = pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("PIL")
    ident = f"vision-{width}x{height}-16384plus-entries-4096"
    assert (gen(ident).params()["width"], gen(ident).params()["height"]) == (width, height)
    path = generate_dataset(ident, gen(ident), tmp_path, entries=5)
    assert path.suffix == ".parquet"
    table = pq.read_table(path)
    assert table.num_rows == 5
    assert table.column_names == ["images", "output"]
    assert b"huggingface" in table.schema.metadata
    first_image = None
    for i, row in enumerate(table.to_pylist()):
        image = row["images"]
        first_image = first_image or image["bytes"]
        assert image["bytes"] == first_image and image["path"] is None
        user, assistant = row["output"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert [(c["type"], c["index"]) for c in user["content"]] == [("text", None), ("image", i)]
        assert len(user["content"][0]["text"].split()) == VISION_QUESTION_WORDS
        assert len(assistant["content"][0]["text"].split()) == 16384
    decoded = jpeg_image(first_image)
    assert (decoded.format, decoded.size) == ("JPEG", (width, height))
    again = generate_dataset(ident, gen(ident), tmp_path / "again", entries=5)
    assert again.read_bytes() == path.read_bytes()


def test_vision_loads_with_hf_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("PIL")
    path = generate_dataset(
        "vision-384x384-16384plus-entries-4096",
        gen("vision-384x384-16384plus-entries-4096"),
        tmp_path / "data",
        entries=3,
    )
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 3
    assert type(ds.features["images"]).__name__ == "Image"


def test_full_size_vision_file_is_small(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("PIL")
    path = generate_dataset(
        "vision-384x384-16384plus-entries-4096", gen("vision-384x384-16384plus-entries-4096"), tmp_path
    )
    # ~60 MB: the ~16k-word answers dominate, as in ado's file; the one image is dictionary-encoded
    assert path.stat().st_size < 100 * 1024 * 1024


def test_write_dataset_exact_path(tmp_path: Path) -> None:
    target = tmp_path / "x.jsonl"
    assert write_dataset("news-chars-512-entries-4096", gen("news-chars-512-entries-4096"), target, entries=2) == target
    assert len(read_rows(target)) == 2
    assert os.listdir(tmp_path) == ["x.jsonl"]


# ----------------------------------------------------------------------- seed 002's own files


@pytest.mark.parametrize("ext", [".jsonl", ".parquet"])
def test_seed_002_file_is_used_when_present(ext: str, tmp_path: Path) -> None:
    ident = "news-chars-512-entries-4096"
    existing = tmp_path / f"{ident}{ext}"
    existing.write_bytes(b"made elsewhere")
    assert resolve_dataset_file(ident, gen(ident), tmp_path, entries=4) == (existing, False)
    assert sorted(os.listdir(tmp_path)) == [existing.name]  # nothing generated beside it


def test_missing_file_is_generated_once(tmp_path: Path) -> None:
    ident = "news-chars-512-entries-4096"
    path, generated = resolve_dataset_file(ident, gen(ident), tmp_path, entries=4)
    assert generated and path == dataset_path(ident, gen(ident), tmp_path, entries=4)
    assert resolve_dataset_file(ident, gen(ident), tmp_path, entries=4) == (path, False)


def test_note3_counts_text_rows_and_refuses_chat_rows(tmp_path: Path) -> None:
    """A chat row (the vision sets' `output`) has no text for seed note 3: refused, never its repr counted."""
    from ftbench_trainer.measure.dataset_tokens import read_texts

    text, chat = tmp_path / "text.jsonl", tmp_path / "chat.jsonl"
    text.write_text(json.dumps({"output": "a b c"}) + "\n")
    chat.write_text(json.dumps({"output": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}) + "\n")
    assert list(read_texts(text, "output")) == ["a b c"]
    with pytest.raises(TypeError, match="'output' holds list, not text"):
        list(read_texts(chat, "output"))


def test_catalog_prompt_tokens_min_is_a_lower_bound_of_every_prompt():
    """Issue 27.1: the rule data.response-fits refuses modelMaxLength <= promptTokensMin, so the
    catalog value must never exceed a prompt's words (a lower bound on its tokens)."""
    from itertools import islice

    from ftbench_trainer.datasets import iter_chars_rows, iter_tokens_rows

    for entry in load_catalog().datasets.values():
        if entry.prompt_tokens_min is None:
            continue
        params = dataset_params(entry.name, gen(entry.name))
        rows = iter_chars_rows if entry.kind == "text-chars" else iter_tokens_rows
        sample = islice(rows(entry.name, params, 0), None if entry.kind == "text-chars" else 16)
        fewest = min(len(row["output"].split(RESPONSE_HEADER)[0].split()) for row in sample)
        assert entry.prompt_tokens_min <= fewest, (entry.name, fewest)
