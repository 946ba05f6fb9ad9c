"""Fixtures of the end-to-end tests: one cluster (scheduler, two nodes' kubelets, operator) for the package.

See e2e_kit for why the components are started once and how the scheduler is kept to these tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_kit import PYTORCHJOB_CRD_FILE, Cluster, image_mode

from ftbench.api.crd import crd, sweep_crd
from ftbench_devcluster.crds import install_crd
from ftbench_devcluster.devup import seed_models

HERE = Path(__file__).resolve().parent
# The cluster that is up, closed after the folder's last test (see pytest_runtest_teardown).
_UP: list[Cluster] = []


@pytest.fixture(scope="package")
def cluster(control_plane: Any, kube_api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The CRDs, the seeded tiny model, the scheduler, the nodes' kubelets and the operator, up for the package.

    The kubelets run the pods in their images (the ones the chart and the cluster profile name)
    when they can be built here (`image_mode`), else as host processes.

    The PyTorchJob CRD goes in before the operator starts, so that kopf watches PyTorchJobs from
    the beginning; without the upstream fixture the 2-node test skips and the others still run.
    """
    install_crd(kube_api, crd())
    install_crd(kube_api, sweep_crd())
    if PYTORCHJOB_CRD_FILE.exists():
        install_crd(kube_api, yaml.safe_load(PYTORCHJOB_CRD_FILE.read_text()))
    cluster = Cluster(control_plane, kube_api, tmp_path_factory.mktemp("e2e"), images=image_mode())
    if seed_models(cluster.pvc_dir) is None:
        pytest.skip("the trainer extra (ftbench_trainer, torch) is not installed")
    try:
        cluster.start()
        _UP.append(cluster)
        yield cluster
    finally:
        if cluster in _UP:
            _UP.remove(cluster)
            cluster.close()


def machine_state(cluster: Cluster) -> str:
    """What a timeout alone does not say: whether the operator, the kubelets and the control plane were
    still up, and how loaded and full the machine was (CI's timeouts could not be told apart otherwise)."""
    lines = [f"{c.name}: {c.state()}" for c in (cluster.operator, cluster.kubelets)]
    for name, proc in cluster.control_plane.processes.items():
        code = proc.poll()
        lines.append(f"{name}: " + ("running" if code is None else f"exited with {code}"))
    lines.append("load average: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    lines.append(f"memory available: {meminfo.get('MemAvailable', '?').strip()}")
    disk = shutil.disk_usage(cluster.workdir)
    lines.append(f"disk free under the cluster's directory: {disk.free / 2**30:.1f} GiB")
    return "\n".join(lines)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Close the cluster as soon as the next test is not an e2e test.

    In a folder without ``__init__.py`` pytest keeps a ``package`` fixture until the session ends:
    this cluster's operator, which watches every namespace, then raced the operator tests' own
    operator (it re-created a Job that a test had just deleted by hand). The fixture's value stays,
    closed; ``ns`` opens it again when an e2e file comes later (xdist hands a worker files in any order)."""
    if _UP and (nextitem is None or Path(nextitem.path).resolve().parent != HERE):
        _UP.pop().close()


@pytest.fixture
def ns(cluster: Cluster, namespace: str) -> str:
    """A fresh namespace served by the package's cluster, where the trainer may report progress; the
    cluster opened again first when an earlier e2e file's teardown closed it (CI lost three tests to a
    closed cluster: their experiments were never seen)."""
    if cluster.closed:
        cluster.reopen()
        _UP.append(cluster)
    return cluster.serve(namespace)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach the operator's and the kubelets' log tails, and the pods' logs."""
    outcome = yield
    report = outcome.get_result()
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(cluster, Cluster):
        report.sections.append(("processes and machine", machine_state(cluster)))
        report.sections.append(("operator log (tail)", cluster.operator.log()[-6000:]))
        report.sections.append(("kubelet logs (tails)", cluster.kubelets.log()))
        namespace = item.funcargs.get("ns")
        if namespace:
            for pod in cluster.pods(namespace, selector=""):
                report.sections.append(
                    (f"pod {pod.metadata.name} log (tail)", cluster.pod_log(namespace, pod.metadata.name))
                )
