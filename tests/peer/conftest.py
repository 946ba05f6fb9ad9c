"""The published ado-sfttrainer package in a cached throwaway environment (tests/peer/ado_env.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .ado_env import ado_package_dir, ensure_ado_env


@pytest.fixture(scope="session")
def ado_dir() -> Path:
    """``ado_actuators/sfttrainer`` of ado-sfttrainer 1.8.12; skips without uv/PyPI unless
    ``FTBENCH_REQUIRE_PEER=1`` (CI), where a missing environment fails."""
    try:
        return ado_package_dir(ensure_ado_env())
    except Exception as exc:
        if os.environ.get("FTBENCH_REQUIRE_PEER") == "1":
            pytest.fail(f"FTBENCH_REQUIRE_PEER=1 but the ado environment cannot be built: {exc}", pytrace=False)
        pytest.skip(f"no ado-sfttrainer environment: {exc}")
