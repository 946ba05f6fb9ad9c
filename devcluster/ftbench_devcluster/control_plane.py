"""Start and stop a real, minimal Kubernetes control plane on 127.0.0.1.

Why a real control plane and not a fake: the operator's behaviour depends on API-server semantics
(defaulting, status subresources, RBAC, owner references and garbage collection, the Job
controller). etcd + kube-apiserver + kube-controller-manager give exactly that, without Docker,
a scheduler or a kubelet. Pods therefore stay Pending; tests play the kubelet by writing the Pod
status subresource, and the Job controller reacts as on a real cluster. Where pods should be
placed as on a cluster (the end-to-end rig's nodes), `ControlPlane.start_scheduler` adds the real
kube-scheduler for pods that name it (``spec.schedulerName``), so the other tests' pods still wait.

Everything here is stdlib (the core package must import with pydantic + pyyaml only); certificates
and keys are made with the ``openssl`` CLI.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ftbench.host.ports import free_port
from ftbench.host.procs import stop_process_group
from ftbench.kubeapi import ApiEndpoint, KubeError, http
from ftbench.kubeapi.wire import JSON
from ftbench_devcluster.binaries import ControlPlaneError, find_binaries

# Service network as in the verified recipe. The advertise address must not be loopback,
# otherwise the apiserver keeps logging errors while reconciling the `kubernetes` endpoints.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ADVERTISE_ADDRESS = "10.0.0.1"


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that SIGKILLs the child when its parent dies (Linux), so a killed pytest leaks
    no servers.

    libc is loaded here, in the parent, so the forked child only makes the prctl call. Note that
    PR_SET_PDEATHSIG fires when the *thread* that forked exits: start ControlPlane from a
    long-lived thread (the main thread in pytest and in ``ftbench dev up``).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:  # pragma: no cover - runs in the forked child
        prctl(pr_set_pdeathsig, signal.SIGKILL)

    return hook


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1,DNS:localhost,IP:{advertise},DNS:kubernetes,DNS:kubernetes.default,\
DNS:kubernetes.default.svc
"""


def _minor_of(binary: Path) -> int:
    """Minor version of a binary; flags removed in 1.24 are passed only to older ones, so newer
    binaries from KUBEBUILDER_ASSETS work too."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v1\.(\d+)\.", out)
    return int(match.group(1)) if match else 0


def scheduler_config(scheduler_name: str, kubeconfig: Path, health: str) -> dict[str, Any]:
    """KubeSchedulerConfiguration (v1beta1, what 1.20 reads) with one profile, `scheduler_name`, no leader election,
    and its plain-HTTP health endpoint at `health` (host:port). JSON is YAML, so the file needs no YAML writer."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        # Health and metrics on a free loopback port instead of 0.0.0.0:10251 (with --config the --port flag is
        # ignored, and an empty address is defaulted): two test workers each start one.
        "healthzBindAddress": health,
        "metricsBindAddress": health,
        "profiles": [{"schedulerName": scheduler_name}],
    }


def _healthy(url: str) -> bool:
    """Whether a component's /healthz answers ok."""
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.read().strip() == b"ok")


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager as child processes, on free loopback ports.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. After ``start()``:
    ``kubeconfig`` (admin, token auth), ``server``, ``token``, ``ca_file``, ``workdir``, ``logs_dir``.
    ``stop()`` is idempotent and safe after a half-finished ``start()``.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        binaries: Mapping[str, str | os.PathLike[str]] | None = None,
        ready_timeout: float = 60.0,
        keep_workdir: bool = False,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        """`apiserver_args`: extra kube-apiserver flags (a benchmark's audit log, say)."""
        self.apiserver_args = tuple(apiserver_args)
        self._binaries = {k: Path(v) for k, v in binaries.items()} if binaries is not None else None
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="ftbench-cp-"))
        self.logs_dir = self.workdir / "logs"
        self.ready_timeout = ready_timeout
        self.keep_workdir = keep_workdir
        self.token = secrets.token_hex(24)
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.ca_file = self.workdir / "pki" / "ca.crt"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._start_failed = False

    # -- public API ---------------------------------------------------------------------------

    @property
    def binaries(self) -> dict[str, Path]:
        if self._binaries is None:
            self._binaries = find_binaries()
        return self._binaries

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items()}

    def start(self) -> ControlPlane:
        """Start all three components; on any failure, stop what was started and re-raise."""
        try:
            self._start()
        except BaseException:
            self._start_failed = True
            self.stop()
            raise
        return self

    def start_scheduler(self, scheduler_name: str, binary: str | os.PathLike[str] | None = None) -> str:
        """Start kube-scheduler for the pods whose ``spec.schedulerName`` is `scheduler_name`; returns its process
        key (`stop_process`). Its own name keeps it off pods that tests bind or leave Pending themselves (they name
        the default-scheduler), and a leader election would only slow its start on a control plane of one."""
        key = f"kube-scheduler-{scheduler_name}"
        path = Path(binary) if binary is not None else find_binaries(("kube-scheduler",))["kube-scheduler"]
        config = self.workdir / f"{key}.json"
        health = f"127.0.0.1:{free_port()}"
        config.write_text(json.dumps(scheduler_config(scheduler_name, self.kubeconfig, health), indent=2) + "\n")
        self._spawn(key, [str(path), f"--config={config}", "--secure-port=0"])
        self._wait(key, lambda: _healthy(f"http://{health}/healthz"), self.ready_timeout)
        return key

    def stop_process(self, key: str, timeout: float = 10.0) -> None:
        """Stop one process this plane started (a scheduler that served one test package)."""
        if (proc := self.processes.pop(key, None)) is not None:
            self._terminate(proc, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM each process group (reverse start order), SIGKILL what is left after ``timeout``."""
        for name in reversed(list(self.processes)):
            self._terminate(self.processes[name], timeout)
        self.processes.clear()
        for f in self._logs:
            f.close()
        self._logs.clear()
        # A failed start keeps its logs for inspection; the error message names the directory.
        if self._own_workdir and not self.keep_workdir and not self._start_failed:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def endpoint(self) -> ApiEndpoint:
        """The API server as the stdlib request path (`ftbench.kubeapi.http`) reaches it."""
        return ApiEndpoint(self.server, token=self.token, ca_file=self.ca_file)

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0, accept: str = JSON) -> Any:
        """Minimal authenticated JSON call to the API server (no client library needed): the
        decoded JSON, or the text of an answer that is not JSON; a failure raises `KubeError`.

        `accept` selects other representations, e.g. the Table kubectl prints
        (application/json;as=Table;v=v1;g=meta.k8s.io).
        """
        raw = http.request(self.endpoint, method, path, body, accept=accept, timeout=timeout)
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _start(self) -> None:
        bins = self.binaries
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = self._make_pki()
        self._write_kubeconfig()

        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        etcd_dir = self.workdir / "etcd"
        etcd_dir.mkdir(mode=0o700, exist_ok=True)
        env = dict(os.environ)
        if platform.machine() in ("aarch64", "arm64"):  # etcd 3.4 refuses to start there otherwise
            env.setdefault("ETCD_UNSUPPORTED_ARCH", "arm64")
        self._spawn(
            "etcd",
            [
                str(bins["etcd"]),
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{self.etcd_peer_port}",
            ],
            env=env,
        )
        self._wait("etcd", lambda: self._etcd_healthy(etcd_url), 30.0)

        self._spawn(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                f"--secure-port={self.apiserver_port}",
                "--bind-address=127.0.0.1",
                f"--advertise-address={ADVERTISE_ADDRESS}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki}/server.crt",
                f"--tls-private-key-file={pki}/server.key",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={pki}/tokens.csv",
                f"--service-account-key-file={pki}/sa.pub",
                f"--service-account-signing-key-file={pki}/sa.key",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                *(["--insecure-port=0"] if self._minor("kube-apiserver") < 24 else []),
                *self.apiserver_args,
            ],
        )
        self._wait("kube-apiserver", self._apiserver_ready, self.ready_timeout)

        self._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig}",
                "--controllers=*",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--secure-port=0",
                *(["--port=0"] if self._minor("kube-controller-manager") < 24 else []),
                f"--service-account-private-key-file={pki}/sa.key",
                f"--root-ca-file={self.ca_file}",
            ],
        )
        # The service-account controllers creating `default` proves the controller-manager runs
        # and is connected; pods cannot be admitted in a namespace before its SA exists anyway.
        self._wait("kube-controller-manager", self._default_sa_exists, self.ready_timeout)

    def _minor(self, name: str) -> int:
        return _minor_of(self.binaries[name])

    def _openssl(self, *args: str) -> None:
        res = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{res.stderr}")

    def _make_pki(self) -> Path:
        """CA, apiserver serving cert, service-account key pair and the static token file."""
        if shutil.which("openssl") is None:
            raise ControlPlaneError("the openssl CLI is required to make the control plane's certificates")
        pki = self.ca_file.parent
        pki.mkdir(parents=True, exist_ok=True)
        cnf = pki / "openssl.cnf"
        cnf.write_text(_OPENSSL_CNF.format(advertise=ADVERTISE_ADDRESS))
        self._openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-config", str(cnf),
            "-extensions", "v3_ca", "-subj", "/CN=ftbench-dev-ca",
            "-keyout", str(pki / "ca.key"), "-out", str(self.ca_file),
        )  # fmt: skip
        self._openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", str(cnf),
            "-subj", "/CN=kube-apiserver", "-keyout", str(pki / "server.key"),
            "-out", str(pki / "server.csr"),
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", str(pki / "server.csr"), "-CA", str(self.ca_file),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
            "-extfile", str(cnf), "-extensions", "v3_server", "-out", str(pki / "server.crt"),
        )  # fmt: skip
        self._openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        self._openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        (pki / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        for key in ("ca.key", "server.key", "sa.key", "tokens.csv"):
            (pki / key).chmod(0o600)
        return pki

    def _write_kubeconfig(self) -> None:
        """JSON is valid YAML, so kubectl and the Python client read it without a YAML writer."""
        import base64

        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ftbench-dev",
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "ftbench-dev", "context": {"cluster": "ftbench-dev", "user": "admin"}}],
            "current-context": "ftbench-dev",
            "preferences": {},
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.logs_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        # Own session => own process group, so stop() can signal the whole group and a Ctrl-C in
        # the terminal does not hit the servers before the Python side has torn down.
        self.processes[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent_hook(),
        )

    def _wait(self, name: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll ``check()`` until true; fail early if ``name`` exited, with its log tail."""
        deadline = time.monotonic() + timeout
        proc = self.processes[name]
        last_error = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ControlPlaneError(self._failure(name, f"exited with code {proc.returncode}"))
            try:
                if check():
                    return
            except (OSError, ValueError, ssl.SSLError, KubeError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)
        raise ControlPlaneError(self._failure(name, f"not ready after {timeout:.0f}s ({last_error})"))

    def _failure(self, name: str, what: str) -> str:
        log = self.logs_dir / f"{name}.log"
        return f"{name} {what}; last lines of {log}:\n{_tail(log)}"

    @staticmethod
    def _etcd_healthy(url: str) -> bool:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")

    def _apiserver_ready(self) -> bool:
        return bool(self._get_or_none("/readyz") == "ok")  # 500 while post-start hooks are still running

    def _default_sa_exists(self) -> bool:
        return self._get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is not None

    def _get_or_none(self, path: str) -> Any:
        """The answer to a GET, None for an error status; no answer at all raises (`_wait` logs it)."""
        try:
            return self.request("GET", path, timeout=2)
        except KubeError as err:
            if not err.status:
                raise
            return None

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Signal the process group (the servers fork nothing today, but be thorough)."""
        stop_process_group(proc, ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)))
        # Stragglers left in the group after the leader is gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1.0)
