"""Fixtures for tests against the real control plane: the ftbench CRD installed once."""

from __future__ import annotations

import pytest

from ftbench.api.crd import crd
from ftbench.api.crd import sweep_crd as sweep_crd_document
from ftbench_devcluster.crds import install_crd


@pytest.fixture(scope="session")
def ftbench_crd(kube_api) -> str:
    return install_crd(kube_api, crd())


@pytest.fixture(scope="session")
def sweep_crd(kube_api) -> str:
    return install_crd(kube_api, sweep_crd_document())
