"""docs/benchmarks.md's ado-autoconf table is the stored comparison tabulated (bench/peer_autoconf.py; the run
itself needs the peer's own environment and a quarter of an hour, so it is a bench, not a test)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import peer_autoconf  # noqa: E402


def test_the_docs_table_is_the_stored_comparison() -> None:
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    start, end = f"<!-- {peer_autoconf.SECTION}:start -->\n", f"\n<!-- {peer_autoconf.SECTION}:end -->"
    committed = docs.split(start, 1)[1].split(end, 1)[0]
    assert committed == peer_autoconf.tabulate(peer_autoconf.RESULT), (
        "run: bench/peer_autoconf.py tabulate --write-docs"
    )
    assert "ado-autoconf" in committed and "leave one model out" in committed
