"""Docstrings say what and why in a few lines; the longer story is in docs/design-notes.md (issue 62).

Every module, class and function docstring in the three packages is at most 15 lines, and every
`docs/design-notes.md, "X"` pointer a docstring ends with names a `## X` section of that page.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ftbench", "operator", "trainer-image")
DESIGN_NOTES = REPO / "docs" / "design-notes.md"
MAX_LINES = 15

POINTER = re.compile(r'docs/design-notes\.md, "([^"]+)"')
HEADING = re.compile(r"^## (.+?)\s*$", re.M)

Documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _docstrings() -> Iterator[tuple[str, str, str]]:
    """(path, name, docstring) of every module, class and function that has one."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, Documented) and (doc := ast.get_docstring(node, clean=False)):
                    name = "<module>" if isinstance(node, ast.Module) else node.name
                    yield str(path.relative_to(REPO)), name, doc


DOCSTRINGS = list(_docstrings())


def test_no_docstring_is_longer_than_15_lines() -> None:
    long = [
        f"{path}:{name}:{lines}"
        for path, name, doc in DOCSTRINGS
        if (lines := len(doc.strip().splitlines())) > MAX_LINES
    ]
    assert not long, f"docstrings over {MAX_LINES} lines (move the story to docs/design-notes.md):\n" + "\n".join(long)


def test_design_notes_pointers_name_a_section() -> None:
    assert DESIGN_NOTES.is_file(), f"{DESIGN_NOTES.relative_to(REPO)} missing"
    sections = set(HEADING.findall(DESIGN_NOTES.read_text()))
    pointers = [(path, name, target) for path, name, doc in DOCSTRINGS for target in POINTER.findall(doc)]
    assert pointers, "no docstring points at docs/design-notes.md"
    missing = [f'{path}:{name}: "{target}"' for path, name, target in pointers if target not in sections]
    assert not missing, "pointers to no `## ` section of docs/design-notes.md:\n" + "\n".join(missing)
