"""Fixtures of the local-run tests: a private FTBENCH_HOME, offline and single-threaded."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs, models and the results store under the test's own directory; nothing is downloaded."""
    monkeypatch.setenv("FTBENCH_HOME", str(tmp_path / "home"))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path / "home"
