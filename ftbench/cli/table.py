"""Plain-text tables for terminals (no dependency beyond the standard library)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, max_cell: int | None = None) -> str:
    """Left-aligned columns; with `max_cell`, longer cells end in "…" so a default table stays readable."""
    cells = [[str(h) for h in headers], *[[cut("" if c is None else str(c), max_cell) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"
