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


def test_rescore_reads_back_the_peers_stored_answers_unchanged() -> None:
    """`rescore` keeps the peer's answers: merged into fresh rows they equal the stored ones field for field."""
    import json

    stored = json.loads(peer_autoconf.RESULT.read_text())
    memory = [{k: v for k, v in r.items() if not k.startswith("peer")} for r in stored["memory_rows"]]
    throughput = [{k: v for k, v in r.items() if not k.startswith("peer")} for r in stored["throughput_rows"]]
    peer_autoconf.merge(memory, throughput, peer_autoconf.stored_peer(peer_autoconf.RESULT))
    assert memory == stored["memory_rows"] and throughput == stored["throughput_rows"]
