"""Session-wide fixtures for the real Kubernetes control plane (see ftbench_devcluster).

Only control-plane fixtures live here; area-specific fixtures go into sub-conftests
(tests/trainer/conftest.py, ...). Tests that use these fixtures must be marked ``@pytest.mark.k8s``.

Without binaries the k8s tests are skipped, unless ``FTBENCH_REQUIRE_K8S=1`` (CI), where a
missing control plane is an error rather than a silent skip.
"""

from __future__ import annotations

import atexit
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ftbench.contracts.env import FTBENCH_PREDICT_PROCESSES, FTBENCH_PREDICTOR
from ftbench_devcluster import BinariesNotFoundError, ControlPlane, find_binaries

# One predictor process per `ftbench predict`, as before the resident predictor: tests run under many
# environments (each its own resident predictor, idle for minutes); tests/trainer/test_resident_predictor.py
# turns it on and stops what it starts.
os.environ.setdefault(FTBENCH_PREDICTOR, "off")
# One predictor per batch of plans too: pytest-xdist already keeps every core busy, and a second predictor would
# only import torch again (tests/unit/test_predict_lanes.py and test_resident_predictor.py ask for more).
os.environ.setdefault(FTBENCH_PREDICT_PROCESSES, "1")

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


@pytest.fixture(scope="session")
def control_plane_binaries() -> dict[str, Path]:
    """etcd/kube-apiserver/kube-controller-manager paths; skip (or fail in CI) when missing."""
    try:
        return find_binaries()
    except BinariesNotFoundError as exc:
        if os.environ.get("FTBENCH_REQUIRE_K8S") == "1":
            pytest.fail(f"FTBENCH_REQUIRE_K8S=1 but {exc}", pytrace=False)
        pytest.skip(f"no Kubernetes control plane: {exc}")


@pytest.fixture(scope="session")
def control_plane(control_plane_binaries: dict[str, Path]) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver + kube-controller-manager for the whole session.

    Stopped by the fixture's finally block; atexit is the backstop for interrupted sessions (and
    the child processes also die with the pytest process via PR_SET_PDEATHSIG).
    """
    cp = ControlPlane(binaries=control_plane_binaries)
    atexit.register(cp.stop)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        atexit.unregister(cp.stop)


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[ApiClient]:
    """A ``kubernetes.client.ApiClient`` logged in as cluster admin (system:masters)."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(kube_api: ApiClient) -> Iterator[str]:
    """A fresh namespace, deleted after the test.

    Waits for its ``default`` ServiceAccount (and, before 1.22, its token secret): until the
    controller-manager has made them, the ServiceAccount admission plugin rejects Pods there.
    """
    from kubernetes.client import CoreV1Api, VersionApi
    from kubernetes.client.exceptions import ApiException

    core = CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"ftbench.dev/test": "true"}}})
    try:
        version = VersionApi(kube_api).get_code()
        needs_token_secret = (int(version.major), int(version.minor.rstrip("+"))) < (1, 22)
        deadline = time.monotonic() + 30
        while True:
            try:
                sa = core.read_namespaced_service_account("default", name)
                if sa.secrets or not needs_token_secret:
                    break
            except ApiException as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                pytest.fail(f"namespace {name}: default ServiceAccount not ready after 30s")
            time.sleep(0.2)
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


# The order the files reach xdist's workers (--dist loadfile hands them out in collection order). The
# longest files go first, so that no worker is left with one at the end while the other idles (from a
# clean-clone `--durations=0` run, in worker-seconds: the release matrix 440, DeepSpeed 254, the
# release parsers 218, the sweep CLI 202, CPU FSDP 201, the catalog predictions 186, the local runs 158,
# the FSDP examples 158, the chart 132, trl 118). The files that run pods in the built images go last:
# hack/test.sh builds the images in the background meanwhile, and their fixtures wait on its lock.
LONGEST_FIRST = (
    "trainer/test_fms_releases.py", "trainer/test_deepspeed.py", "unit/test_render_fms_args.py",
    "local/test_sweep_cli.py", "trainer/test_fsdp_cpu.py", "trainer/test_predict_catalog.py",
    "local/test_local_run.py", "local/test_fsdp_examples.py", "ship/test_chart_install.py",
    "trainer/test_trl_engine.py",
)  # fmt: skip
IMAGES_LAST = ("e2e", "images")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorder the collected tests as LONGEST_FIRST and IMAGES_LAST say (a stable sort otherwise)."""
    here = Path(__file__).resolve().parent

    def rank(item: pytest.Item) -> tuple[int, int]:
        rel = (
            Path(item.path).resolve().relative_to(here).as_posix() if here in Path(item.path).resolve().parents else ""
        )
        if rel in LONGEST_FIRST:
            return (0, LONGEST_FIRST.index(rel))
        return (2, 0) if rel.split("/", 1)[0] in IMAGES_LAST else (1, 0)

    items.sort(key=rank)
