"""docs/benchmarks.md's "Outside the calibration" table is what bench/outside_domain.py computes from sample A."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_table_is_the_bench() -> None:
    pytest.importorskip("numpy")
    sys.path.insert(0, str(REPO / "bench"))
    import outside_domain

    docs = (REPO / "docs" / "benchmarks.md").read_text()
    section = outside_domain.SECTION
    committed = docs.split(f"<!-- {section}:start -->\n", 1)[1].split(f"\n<!-- {section}:end -->", 1)[0]
    assert committed == outside_domain.report(), "run: bench/outside_domain.py --write-docs"
