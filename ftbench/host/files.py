"""Writing or checking generated files on this machine: the one loop behind `ftbench docs`, the engine
locks and flags (the lowest layer, so any generator may use it).

Each generator computes its files' text from one source; with `check` nothing is written and a
stale file is reported with the command that regenerates it (tests call the generators that way).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def sync_generated(files: Mapping[Path, str], *, check: bool, regenerate: str) -> int:
    """Write every file whose text differs (check=False) or report them (check=True); exit status."""
    stale = []
    for path, text in files.items():
        if path.is_file() and path.read_text() == text:
            continue
        if check:
            stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `{regenerate}`", file=sys.stderr)
        return 1
    return 0
