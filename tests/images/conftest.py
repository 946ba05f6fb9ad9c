"""Fixtures of the image tests: the images, built (or found current) once per session.

The images come from hack/build-images.sh, cached by content, so a second session reuses them in
seconds. Without buildah the tests skip, unless ``FTBENCH_REQUIRE_IMAGES=1`` (CI), where that is a
failure. The end-to-end helpers (a local kubelet, experiments) come from tests/e2e.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_kit import build_images

from ftbench.contracts.images import CACHE_KEY_LABEL
from ftbench.images import plan, store


@pytest.fixture(scope="session")
def images() -> list[plan.ImageBuild]:
    """CI's images (operator, trl, the default and newest fms-hf-tuning), current in storage."""
    if not store.available() and os.environ.get("FTBENCH_REQUIRE_IMAGES") != "1":
        pytest.skip("buildah is not installed (hack/build-images.sh installs it as root on Debian)")
    build_images()
    keys = {base: store.label(base, CACHE_KEY_LABEL) or "" for base in (plan.PYTHON_BASE, plan.torch_base())}
    return plan.builds(keys)
