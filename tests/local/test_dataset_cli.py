"""`ftbench dataset`: the trainer's generators behind the main CLI, parameters from the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftbench.catalog import load_catalog
from ftbench.cli import main


def test_generate_writes_the_requested_entries(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "generate", "news-chars-512-entries-4096", "-o", str(tmp_path), "--entries", "4"]) == 0
    path = Path(capfd.readouterr().out.strip())  # the generators run as their own process
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["output"]) == 2 * 512 + 117 for r in rows)


def test_generators_come_from_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """`ftbench dataset list` prints the catalog's generators, the ones a plan carries to the trainer."""
    assert main(["dataset", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    catalog = load_catalog().datasets
    assert set(listed) == set(catalog)
    assert (
        listed["news-tokens-128kplus-entries-320"]["min_tokens"]
        == catalog["news-tokens-128kplus-entries-320"].min_tokens
    )


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset"]) == 2
    assert "generate DATASET_ID" in capsys.readouterr().err
