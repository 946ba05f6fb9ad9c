"""hack/check_commits.py: the subjects `git log --oneline` shows are one scannable line each (issue 62.3)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_commits", REPO / "hack" / "check_commits.py")
assert spec and spec.loader
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_a_good_subject_passes_and_each_fault_is_named() -> None:
    assert check.problems("Add ftbench calibrate: fit a cluster's corrections from its runs") == []
    assert check.problems("x" * 73 + "X")[0].startswith("74 characters")
    assert check.problems("Fix the verdict.") == ["ends with a period"]
    assert check.problems("Added a table") == ["not in the imperative (Add, Fix, Update, ...)"]
    assert check.problems("add a table") == ["does not start with a capital letter"]


def test_the_history_after_the_rule_passes() -> None:
    """What CI checks on a clone of main: every commit after the rule's first (hack/test.sh runs the same)."""
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "check_commits.py")], cwd=REPO, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
