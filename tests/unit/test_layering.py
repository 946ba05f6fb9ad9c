"""Which package may import which: the arrows of docs/architecture.md, checked on the source.

ftbench (pydantic + pyyaml) is what the operator image and the CLI carry; it starts the trainer as
a process and never imports it. The trainer never imports the operator (its image has no kopf), and
the operator never imports the trainer (its image has no torch).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "ftbench": REPO / "ftbench",
    "ftbench_operator": REPO / "operator" / "ftbench_operator",
    "ftbench_trainer": REPO / "trainer-image" / "ftbench_trainer",
}
FORBIDDEN = {
    "ftbench": {"ftbench_trainer", "ftbench_operator", "kopf", "torch", "transformers"},
    "ftbench_operator": {"ftbench_trainer", "torch", "transformers"},
    "ftbench_trainer": {"ftbench_operator", "kopf"},
}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_arrow_goes_the_wrong_way(package: str) -> None:
    wrong = {
        str(path.relative_to(REPO)): sorted(_imports(path) & FORBIDDEN[package])
        for path in PACKAGES[package].rglob("*.py")
    }
    assert {path: names for path, names in wrong.items() if names} == {}
