"""The documented CRD install on an API server older than 1.25 (docs/quickstart.md).

kubectl checks a file against the server's OpenAPI schema before it applies it; a 1.20 server's
schema has no ``x-kubernetes-validations``, so the plain command fails there and the documented
one (``--validate=false``) must work, for the first install and again for an upgrade.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.k8s
REPO = Path(__file__).resolve().parents[2]


def kubectl(control_plane: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    return subprocess.run(
        ["kubectl", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def test_documented_crd_install_works_before_1_25(control_plane: Any, kube_api: Any) -> None:
    from kubernetes.client import VersionApi

    if shutil.which("kubectl") is None:
        pytest.skip("no kubectl")
    version = VersionApi(kube_api).get_code()
    if (int(version.major), int(version.minor.rstrip("+"))) >= (1, 25):
        pytest.skip(f"the server is {version.git_version}: it knows x-kubernetes-validations")
    plain = kubectl(control_plane, "apply", "-f", "crds/")
    assert plain.returncode != 0 and "x-kubernetes-validations" in plain.stderr, plain
    for _ in range(2):  # install, then upgrade over it
        documented = kubectl(control_plane, "apply", "--validate=false", "-f", "crds/")
        assert documented.returncode == 0, documented.stderr
    assert "quickstart" in (REPO / "helm" / "ftbench" / "Chart.yaml").read_text()
    assert "kubectl apply --validate=false -f crds/" in (REPO / "docs" / "quickstart.md").read_text()
