"""The real operator (`python -m ftbench_operator`) as a subprocess against the test control plane.

A subprocess rather than `KopfRunner`: the restart test kills it with SIGKILL mid-run, as a node
failure would, and its log file is printed when a test fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_testkit import TEST_PROFILE, Kubelet

from ftbench.api.crd import crd, sweep_crd
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench_devcluster import ControlPlane
from ftbench_devcluster.crds import install_crd

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OperatorProcess:
    """Start/kill/restart the operator; `log()` returns what it printed so far."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        profile: dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
        profile_file: bool = True,
    ) -> None:
        """profile_file False: no profile file, so the operator reads its profile ConfigMap (as in
        a cluster); `env` adds FTBENCH_OPERATOR_* settings."""
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.profile_file: Path | None = workdir / "profile.yaml" if profile_file else None
        if self.profile_file is not None:
            self.profile_file.write_text(yaml.safe_dump(profile if profile is not None else TEST_PROFILE))
        self.env = env or {}
        self.log_file = workdir / "operator.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = _free_port()
        self.health_port = _free_port()

    def start(self, *extra_args: str) -> OperatorProcess:
        """`extra_args` go to `kopf run` (e.g. `--namespace NS` for the namespaced mode)."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "FTBENCH_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "FTBENCH_OPERATOR_IMAGE_PULL_GRACE_SECONDS": "5",
            "FTBENCH_OPERATOR_API_RETRY_DELAY_SECONDS": "0.5",
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "operator")]),
            **({"FTBENCH_OPERATOR_PROFILE_FILE": str(self.profile_file)} if self.profile_file else {}),
            **self.env,
        }
        env.pop("POD_NAMESPACE", None)  # outside a pod, as `kopf run` / `ftbench dev up`
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ftbench_operator",
                "--verbose",
                f"--liveness=http://127.0.0.1:{self.health_port}/healthz",
                *extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator not healthy after 60s:\n{self.log()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def metrics(self) -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()


@pytest.fixture(scope="session")
def experiment_crd(kube_api: Any) -> str:
    """The FineTuneExperiment CRD, and the FineTuneSweep CRD whose children are experiments
    (tests/k8s has its own fixture; conftests do not cross folders)."""
    install_crd(kube_api, sweep_crd())
    return install_crd(kube_api, crd())


# The session's operator while it runs (see pytest_runtest_teardown).
_LIVE: list[OperatorProcess] = []
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def session_operator(
    control_plane: Any, experiment_crd: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(control_plane.kubeconfig, tmp_path_factory.mktemp("operator"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def operator(session_operator: OperatorProcess) -> OperatorProcess:
    """The session's operator (one per worker, shared by this folder's tests), started when it is not
    running: first use, a test that killed it, or this folder's files coming back after others."""
    if not session_operator.running():
        session_operator.start()
    if session_operator not in _LIVE:
        _LIVE.append(session_operator)
    return session_operator


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the session's operator when the next test is not in this folder: it watches every namespace,
    and the end-to-end tests' own operator (tests/e2e, which the run puts last) must be the only one."""
    if _LIVE and (nextitem is None or Path(nextitem.path).resolve().parent != HERE):
        _LIVE.pop().stop()


@pytest.fixture
def operator_process() -> type[OperatorProcess]:
    """The class itself, for tests that run an operator of their own (other flags, other cluster)."""
    return OperatorProcess


@pytest.fixture
def own_cluster(control_plane_binaries: dict[str, Path]) -> Iterator[ControlPlane]:
    """A control plane of the test's own, for an operator with other settings than the session's."""
    with ControlPlane(binaries=control_plane_binaries) as cp:
        yield cp


@pytest.fixture
def kubelet(kube_api: Any, namespace: str) -> Kubelet:
    return Kubelet(kube_api, namespace)


@pytest.fixture
def create_experiment(kube_api: Any, namespace: str) -> Callable[..., dict[str, Any]]:
    from kubernetes.client import CustomObjectsApi

    custom = CustomObjectsApi(kube_api)

    def create(spec: dict[str, Any], name: str | None = None, **metadata: Any) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name or f"fte-{uuid.uuid4().hex[:6]}", **metadata},
            "spec": spec,
        }
        return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    return create


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach the operator's log tail to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "operator" in getattr(item, "funcargs", {}):
        proc = item.funcargs["operator"]
        noise = ("succeeded.", "Unresolved resources", "GET /healthz")
        lines = [line for line in proc.log().splitlines() if not any(n in line for n in noise)]
        # A module's tests share one operator: its lines about this test's namespace say the most.
        namespace = item.funcargs.get("namespace")
        ours = [line[:400] for line in lines if namespace and f"{namespace}/" in line]
        if ours:
            report.sections.append((f"operator log about namespace {namespace} (tail)", "\n".join(ours[-150:])))
        report.sections.append(("operator log (tail)", "\n".join(lines[-40:])))
