"""Fixtures for tests against the real control plane: the ftbench CRD installed once."""

from __future__ import annotations

import pytest

from ftbench.api.crd import crd
from ftbench.devcluster.crds import install_crd


@pytest.fixture(scope="session")
def ftbench_crd(kube_api) -> str:
    return install_crd(kube_api, crd())
