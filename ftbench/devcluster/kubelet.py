"""A local kubelet: runs the pods of the test control plane as local processes.

The test control plane (``ftbench.devcluster.ControlPlane``) has no scheduler and no kubelet, so
pods stay Pending. This module plays both, for development and end-to-end tests, without
containers or images:

- It registers a Node (capacity: CPUs, memory, ``nvidia.com/gpu`` = local GPUs; the labels a
  cluster profile expects, e.g. the GPU product label) with a Ready condition and a node Lease,
  renewed every few seconds, so the node controller keeps it Ready.
- Scheduler: pods without ``spec.nodeName`` (default scheduler) whose ``nodeSelector`` matches
  the node and whose GPU request fits are bound to it through the Binding subresource.
- Kubelet: each container of a pod bound to the node runs its ``command`` + ``args`` as a local
  process (``podrun``), with the container's environment (downward API, ConfigMap/Secret
  references), working directory and volume mounts, in a private mount/UTS/PID namespace with
  its own loopback address (127.x.y.z) as pod IP and an ``/etc/hosts`` that resolves the pod DNS
  names of its namespace (``hosts``). The image is ignored: commands come from ``--bin-dir``
  (default: this Python's bin directory, where ``ftbench-trainer`` is installed) and the host.
- Status: Pending -> Running (startTime, podIP, running containers) -> Succeeded/Failed with
  each container's exit code, reason and termination message, as a real kubelet reports them,
  so the Job controller and the operator see what they would see on a cluster. Logs stay in
  ``<state-dir>/pods/<pod>/containers/<name>/log``.
- Deletion: a pod with a deletionTimestamp has its process group killed, then the kubelet
  confirms the deletion (grace period 0).
- Restarts: everything is kept in ``--state-dir``; containers outlive the kubelet, and a new
  kubelet adopts them (still running, or finished while it was away). A container whose process
  vanished without an exit record ends with reason ``KubeletRestarted``.

It polls the API server (a list of pods every ``--interval`` seconds) instead of watching:
on a dev cluster that is cheap, and there is no watch-resume logic to get wrong.

Known simplifications: ``restartPolicy`` is treated as Never, init containers, probes,
securityContext (the process runs as the kubelet's user), resource limits and taints are ignored;
an in-memory emptyDir is a tmpfs per container (not shared between containers of a pod).

Run: ``python -m ftbench.devcluster.kubelet --kubeconfig K --node-name N --state-dir D``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import ftbench
from ftbench.contracts.labels import LOCAL_KUBELET_LABEL
from ftbench.devcluster import hosts as H
from ftbench.devcluster import podspec
from ftbench.devcluster.podrun import EXIT_FILE, SPEC_FILE, now

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Obj = dict[str, Any]
log = logging.getLogger("ftbench.kubelet")

GPU_RESOURCE = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")
MAX_MESSAGE_BYTES = 4096  # what a kubelet keeps of a termination message
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048  # FallbackToLogsOnError: the log tail
HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
KILL_GRACE_CAP = 10.0  # seconds; longer grace periods are not worth waiting for on a dev machine


class KubeError(RuntimeError):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:500].decode(errors='replace')}")
        self.status = status


class Rest:
    """JSON in, JSON out over the `kubernetes` client's configured connection (any kubeconfig auth).

    The typed API methods are avoided on purpose: pods are handled as plain dicts, with the field
    names of the Kubernetes docs, and merge patches are sent as such.
    """

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.server = str(api.configuration.host)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | os.PathLike[str]) -> Rest:
        from kubernetes import config

        return cls(config.new_client_from_config(config_file=str(kubeconfig)))

    def call(
        self, method: str, path: str, body: Obj | None = None, *, patch: bool = False, missing_ok: bool = False
    ) -> Obj | None:
        content_type = "application/merge-patch+json" if patch else "application/json"
        params = self.api.param_serialize(
            method,
            path,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(*params, _request_timeout=30)
        data = resp.read()
        if missing_ok and resp.status in (404, 409):
            return None
        if resp.status >= 300:
            raise KubeError(resp.status, data)
        return json.loads(data) if data else {}


class _ApiObjects:
    """``podspec.ObjectSource`` over the API server."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self.rest.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", missing_ok=True)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.rest.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", missing_ok=True)

    def service_account_token(self, namespace: str, account: str, audience: str | None, seconds: int) -> str:
        spec: Obj = {"expirationSeconds": max(seconds, 600)}
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        res = self.rest.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body)
        return str((res or {}).get("status", {}).get("token", ""))


# -- local state ---------------------------------------------------------------------------------


@dataclass
class ContainerRun:
    """One container's process; ``result`` is its exit record once it has ended."""

    name: str
    dir: Path
    pid: int | None = None
    started_at: str = ""
    popen: subprocess.Popen[bytes] | None = None
    result: Obj | None = None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and _pid_runs(self.pid, str(self.dir))

    def read_exit(self) -> Obj | None:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads((self.dir / EXIT_FILE).read_text()))
        return None


@dataclass
class PodRun:
    """A pod this kubelet has started, persisted in ``<dir>/pod.json`` for restarts."""

    namespace: str
    name: str
    uid: str
    dir: Path
    ip: str
    hostname: str
    subdomain: str
    labels: dict[str, str]
    start_time: str
    containers: dict[str, ContainerRun] = field(default_factory=dict)
    reported: str = ""
    deleting: bool = False
    pod: Obj = field(default_factory=dict)

    @property
    def address(self) -> H.PodAddress:
        return H.PodAddress(self.name, self.namespace, self.ip, self.hostname, self.subdomain, self.labels)

    def save(self) -> None:
        data = {
            "namespace": self.namespace, "name": self.name, "uid": self.uid, "ip": self.ip,
            "hostname": self.hostname, "subdomain": self.subdomain, "labels": self.labels,
            "startTime": self.start_time, "reported": self.reported, "containers": list(self.containers),
        }  # fmt: skip
        tmp = self.dir / "pod.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.dir / "pod.json")

    @classmethod
    def load(cls, directory: Path) -> PodRun:
        data = json.loads((directory / "pod.json").read_text())
        run = cls(
            data["namespace"], data["name"], data["uid"], directory, data["ip"], data["hostname"],
            data["subdomain"], data["labels"], data["startTime"], reported=data.get("reported", ""),
        )  # fmt: skip
        for name in data["containers"]:
            cdir = directory / "containers" / name
            c = ContainerRun(name, cdir)
            with contextlib.suppress(OSError, ValueError):
                started = json.loads((cdir / "pid").read_text())
                c.pid, c.started_at = int(started["pid"]), started["startedAt"]
            run.containers[name] = c
        return run


def _pid_runs(pid: int, marker: str) -> bool:
    """Whether ``pid`` is alive (not a zombie) and still the process we started (its command line
    names our container directory: pids get reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z" and marker in cmdline.split("\0")


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_all_pods(state_dir: str | os.PathLike[str]) -> int:
    """SIGKILL every container process recorded under ``state_dir`` (``ftbench dev down``, tests).

    Containers outlive the kubelet by design; this is how to stop them for good. Returns how many
    were running.
    """
    killed = 0
    for pid_file in Path(state_dir).glob("pods/*/containers/*/pid"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads(pid_file.read_text())["pid"])
            if _pid_runs(pid, str(pid_file.parent)):
                _kill_group(pid, signal.SIGKILL)
                killed += 1
    return killed


# -- the node ------------------------------------------------------------------------------------


def local_gpu_count() -> int:
    """GPUs on this machine: NVML if installed, else ``nvidia-smi -L``, else 0."""
    with contextlib.suppress(Exception):
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    if smi := shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
            return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def _memory_kib() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 8 * 1024 * 1024


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _gpu_request(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        amount = (res.get("requests") or {}).get(GPU_RESOURCE) or (res.get("limits") or {}).get(GPU_RESOURCE) or 0
        total += int(amount)
    return total


def _isolation_prefix() -> list[str] | None:
    """The ``unshare`` command line that gives a container its namespaces, or None if impossible.

    As root: mount + UTS + PID namespaces (the PID namespace means killing its first process
    kills everything the container started). As another user, the same inside a user namespace.
    """
    if shutil.which("unshare") is None:
        return None
    base = ["unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
    candidates = [base] if os.geteuid() == 0 else [[*base, "--user", "--map-root-user"]]
    for prefix in candidates:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([*prefix, "--", "true"], capture_output=True, timeout=10, check=False).returncode == 0:
                return [*prefix, "--"]
    return None


# -- the kubelet ---------------------------------------------------------------------------------


class LocalKubelet:
    """Registers the node and keeps the pods bound to it in sync with local processes."""

    def __init__(
        self,
        rest: Rest,
        node_name: str,
        state_dir: str | os.PathLike[str],
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        labels: dict[str, str] | None = None,
        gpus: int | None = None,
        pass_env: tuple[str, ...] = (),
        namespace_labels: dict[str, str] | None = None,
        interval: float = 0.5,
        isolate: bool = True,
    ) -> None:
        self.rest = rest
        self.objects = _ApiObjects(rest)
        self.node_name = node_name
        self.state_dir = Path(state_dir).resolve()
        self.pods_dir = self.state_dir / "pods"
        self.pvc_dir = self.state_dir / "pvc"
        self.bin_dir = str(bin_dir) if bin_dir else str(Path(sys.executable).parent)
        self.labels = dict(labels or {})
        self.gpus = local_gpu_count() if gpus is None else gpus
        self.pass_env = pass_env
        self.namespace_labels = dict(namespace_labels or {})
        self.interval = interval
        self.prefix = _isolation_prefix() if isolate else None
        if isolate and self.prefix is None:
            log.warning(
                "no mount namespaces (unshare unavailable or not permitted): volumes and /etc/hosts are not mounted"
            )
        self.runs: dict[str, PodRun] = {}
        self._notes: dict[str, str] = {}  # last Pending message per pod uid, to patch only changes
        self._octet = 100 + zlib.crc32(node_name.encode()) % 100  # 127.<octet>.x.y, per node name
        self._lock = threading.Lock()  # guards self.runs against the deletion threads

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: heartbeat the node, sync pods every ``interval`` seconds."""
        self.register_node()
        self.adopt()
        threading.Thread(target=self._heartbeat_loop, args=(stop,), name="heartbeat", daemon=True).start()
        while not stop.is_set():
            try:
                pods = (self.rest.call("GET", "/api/v1/pods") or {}).get("items", [])
                self.sync(pods)
            except Exception:  # keep serving: the API server may restart, a pod may be odd
                log.exception("sync failed")
            stop.wait(self.interval)

    def adopt(self) -> None:
        """Load the pods a previous kubelet started from the state dir."""
        for pod_json in sorted(self.pods_dir.glob("*/pod.json")):
            try:
                run = PodRun.load(pod_json.parent)
            except (OSError, ValueError, KeyError) as err:
                log.warning("ignoring unreadable %s: %s", pod_json, err)
                continue
            for c in run.containers.values():
                if c.read_exit() is None and not c.alive():
                    c.result = {
                        "exitCode": 137, "reason": "KubeletRestarted", "startedAt": c.started_at, "finishedAt": now(),
                        "message": "the local kubelet restarted and the container's process was gone",
                    }  # fmt: skip
            self.runs[run.uid] = run
            log.info("adopted pod %s/%s (%s)", run.namespace, run.name, run.reported or "running")

    # -- node ----------------------------------------------------------------------------------

    def node_labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
            LOCAL_KUBELET_LABEL: "true",
            **self.labels,
        }

    def register_node(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "labels": self.node_labels()}}
        if self.rest.call("POST", "/api/v1/nodes", body, missing_ok=True) is None:  # exists: refresh labels
            self.rest.call(
                "PATCH", f"/api/v1/nodes/{self.node_name}", {"metadata": {"labels": self.node_labels()}}, patch=True
            )
        resources = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{_memory_kib()}Ki",
            "pods": "110",
            GPU_RESOURCE: str(self.gpus),
        }
        status = {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.node_name},
            ],
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": "ftbench local kubelet",
                "containerRuntimeVersion": "ftbench-local://1",
                "kubeletVersion": "v1.20.2-ftbench-local",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": self.node_labels()["kubernetes.io/arch"],
            },
        }
        self.rest.call("PATCH", f"/api/v1/nodes/{self.node_name}/status", {"status": status}, patch=True)
        self.heartbeat()
        log.info("node %s registered (%s GPUs, labels %s)", self.node_name, self.gpus, self.labels)

    def heartbeat(self) -> None:
        t = now()
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHas{reason}",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
            for kind, reason in (
                ("MemoryPressure", "SufficientMemory"),
                ("DiskPressure", "NoDiskPressure"),
                ("PIDPressure", "SufficientPID"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "ftbench local kubelet is posting ready status",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
        )
        self.rest.call(
            "PATCH", f"/api/v1/nodes/{self.node_name}/status", {"status": {"conditions": conditions}}, patch=True
        )
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node_name}"
        spec = {"holderIdentity": self.node_name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_time()}
        if self.rest.call("PATCH", lease_path, {"spec": spec}, patch=True, missing_ok=True) is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.node_name},
                "spec": spec,
            }
            self.rest.call(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body, missing_ok=True
            )

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                self.heartbeat()
            except Exception:
                log.exception("heartbeat failed")

    # -- sync ----------------------------------------------------------------------------------

    def _served_namespaces(self) -> set[str] | None:
        """Namespaces whose pods this kubelet binds (``--namespace-label``), None for all.

        Lets tests run a kubelet on a shared control plane without taking other tests' pods.
        """
        if not self.namespace_labels:
            return None
        items = (self.rest.call("GET", "/api/v1/namespaces") or {}).get("items", [])
        return {
            n["metadata"]["name"] for n in items if H.selects(self.namespace_labels, n["metadata"].get("labels") or {})
        }

    def sync(self, pods: list[Obj]) -> None:
        mine: set[str] = set()
        served = self._served_namespaces()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node and served is not None and pod["metadata"]["namespace"] not in served:
                continue
            if not node:
                self.maybe_bind(pod)
            elif node == self.node_name:
                mine.add(pod["metadata"]["uid"])
                self.sync_pod(pod)
        with self._lock:
            gone = [run for uid, run in self.runs.items() if uid not in mine and not run.deleting]
        for run in gone:  # deleted while we were away, or force-deleted
            self._terminate(run, grace=0.0)
            self._forget(run)
        self.check_processes()
        self.refresh_hosts()

    def maybe_bind(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        labels = self.node_labels()
        selector = spec.get("nodeSelector") or {}
        reason = ""
        if any(labels.get(k) != v for k, v in selector.items()):
            reason = f"node {self.node_name} does not match nodeSelector {selector} (labels: --label k=v)"
        elif (want := _gpu_request(pod)) and want + self._gpus_in_use() > self.gpus:
            reason = f"node {self.node_name} has {self.gpus} {GPU_RESOURCE}, {self._gpus_in_use()} in use; pod requests {want}"
        if reason:
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": reason,
                "lastTransitionTime": now(),
            }
            self._note(pod, reason, {"phase": "Pending", "conditions": [condition]})
            return
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        self.rest.call(
            "POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", body, missing_ok=True
        )
        log.info("bound %s/%s to %s", meta["namespace"], meta["name"], self.node_name)

    def _gpus_in_use(self) -> int:
        with self._lock:
            return sum(_gpu_request(r.pod) for r in self.runs.values() if r.reported not in TERMINAL and not r.deleting)

    def _note(self, pod: Obj, message: str, status: Obj) -> None:
        """Patch a Pending pod's status, once per distinct message (the sync loop runs twice a second)."""
        uid = pod["metadata"]["uid"]
        if self._notes.get(uid) != message:
            self._notes[uid] = message
            self._patch_status(pod["metadata"], status)

    def sync_pod(self, pod: Obj) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        with self._lock:
            run = self.runs.get(meta["uid"])
        if meta.get("deletionTimestamp"):
            if run is None:
                self._confirm_deletion(meta)
            elif not run.deleting:
                run.deleting = True
                grace = min(float(meta.get("deletionGracePeriodSeconds") or 0), KILL_GRACE_CAP)
                threading.Thread(target=self._delete, args=(run, grace), daemon=True).start()
            return
        if run is not None:
            run.pod = pod
            if run.reported not in TERMINAL and run.containers and all(c.result for c in run.containers.values()):
                self.report_finished(run)
            return
        if status.get("phase") in TERMINAL:
            return
        if any(set(cs.get("state") or {}) & {"running", "terminated"} for cs in status.get("containerStatuses") or []):
            # Started by a kubelet whose state dir we do not have.
            self._patch_status(
                meta,
                {"phase": "Failed", "reason": "KubeletRestarted", "message": "the local kubelet lost this pod's state"},
            )
            return
        try:
            self.start_pod(pod)
        except podspec.PodConfigError as err:
            waiting = [{"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
                        "state": {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}}
                       for c in pod["spec"]["containers"]]  # fmt: skip
            self._note(pod, str(err), {"phase": "Pending", "hostIP": "127.0.0.1", "containerStatuses": waiting})

    # -- starting ------------------------------------------------------------------------------

    def allocate_ip(self) -> str:
        with self._lock:
            used = {r.ip for r in self.runs.values()}
        for n in range(1, 256 * 254):
            ip = f"127.{self._octet}.{n // 254}.{n % 254 + 1}"
            if ip not in used:
                return ip
        raise RuntimeError("no free loopback address")

    def base_env(self, hostname: str) -> dict[str, str]:
        """What an image and a kubelet would put into every container's environment."""
        server = urlparse(self.rest.server)
        env = {
            "PATH": podspec.default_path(self.bin_dir),
            "HOME": os.environ.get("HOME", "/root"),
            "HOSTNAME": hostname,
            "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        }
        env.update({k: os.environ[k] for k in self.pass_env if k in os.environ})
        return env

    def start_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        ip, start = self.allocate_ip(), now()
        # The pod as the downward API sees it once running.
        view = copy.deepcopy(pod)
        view.setdefault("status", {}).update({"podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1"})
        directory = self.pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        hostname = H.pod_hostname(pod)
        run = PodRun(
            meta["namespace"],
            meta["name"],
            meta["uid"],
            directory,
            ip,
            hostname,
            spec.get("subdomain", ""),
            dict(meta.get("labels") or {}),
            start,
            pod=pod,
        )
        try:
            volumes = podspec.prepare_volumes(view, directory / "volumes", self.pvc_dir, self.objects)
            H.write_in_place(directory / "hosts", "")
            specs = {c["name"]: self._container_spec(view, c, run, volumes) for c in spec["containers"]}
        except podspec.PodConfigError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        for name in specs:
            run.containers[name] = ContainerRun(name, directory / "containers" / name)
        run.save()
        with self._lock:
            self.runs[run.uid] = run
        self.refresh_hosts(only=run.namespace, force=True)
        for name, cspec in specs.items():
            self._spawn(run.containers[name], cspec)
        self._notes.pop(run.uid, None)
        log.info("started pod %s/%s at %s", run.namespace, run.name, ip)
        self._patch_status(meta, self._running_status(run))
        run.reported = "Running"
        run.save()

    def _container_spec(self, view: Obj, container: Obj, run: PodRun, volumes: dict[str, podspec.VolumeDir]) -> Obj:
        env = podspec.container_env(view, container, self.base_env(run.hostname), self.objects)
        argv = podspec.resolve_command(container, env)
        cdir = run.dir / "containers" / container["name"]
        cdir.mkdir(parents=True, exist_ok=True)
        (cdir / "termination-log").write_bytes(b"")
        mounts = podspec.container_mounts(container, volumes)
        mounts.append({"target": "/etc/hosts", "source": str(run.dir / "hosts"), "isFile": True})
        mounts.append(
            {
                "target": podspec.termination_message_path(container),
                "source": str(cdir / "termination-log"),
                "isFile": True,
            }
        )
        return {
            "argv": argv,
            "env": env,
            "workingDir": container.get("workingDir", ""),
            "hostname": run.hostname,
            "mounts": mounts,
            "isolate": self.prefix is not None,
        }

    def _spawn(self, c: ContainerRun, cspec: Obj) -> None:
        (c.dir / SPEC_FILE).write_text(json.dumps(cspec, indent=1))
        # podrun must import ftbench whatever the container's PYTHONPATH: its own env is the kubelet's.
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(Path(ftbench.__file__).parents[1]), os.environ.get("PYTHONPATH")])
            ),
        }
        with (c.dir / "log").open("ab") as out:
            c.popen = subprocess.Popen(
                [*(self.prefix or []), sys.executable, "-m", "ftbench.devcluster.podrun", str(c.dir)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=c.dir, env=env, start_new_session=True,
            )  # fmt: skip
        c.pid, c.started_at = c.popen.pid, now()
        (c.dir / "pid").write_text(json.dumps({"pid": c.pid, "startedAt": c.started_at}))

    # -- status ----------------------------------------------------------------------------------

    def _patch_status(self, meta: Obj, status: Obj) -> None:
        # metadata.uid in a merge patch is a precondition: a recreated pod of the same name is not touched.
        body = {"metadata": {"uid": meta["uid"]}, "status": status}
        self.rest.call(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            body,
            patch=True,
            missing_ok=True,
        )

    def _conditions(self, ready: bool, reason: str = "") -> list[Obj]:
        t = now()
        out = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
        ]
        for kind in ("ContainersReady", "Ready"):
            cond = {"type": kind, "status": str(ready), "lastTransitionTime": t}
            if reason:
                cond["reason"] = reason
            out.append(cond)
        return out

    def _container_base(self, run: PodRun, name: str) -> Obj:
        image = next(
            (c.get("image", "") for c in (run.pod.get("spec") or {}).get("containers", []) if c["name"] == name), ""
        )
        return {
            "name": name,
            "image": image,
            "imageID": "",
            "containerID": f"ftbench-local://{run.uid}/{name}",
            "restartCount": 0,
        }

    def _running_status(self, run: PodRun) -> Obj:
        statuses = [
            {
                **self._container_base(run, c.name),
                "ready": True,
                "started": True,
                "state": {"running": {"startedAt": c.started_at}},
            }
            for c in run.containers.values()
        ]
        return {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": run.ip, "podIPs": [{"ip": run.ip}],
            "startTime": run.start_time, "conditions": self._conditions(True), "containerStatuses": statuses,
        }  # fmt: skip

    def terminated_state(self, run: PodRun, c: ContainerRun) -> Obj:
        """``state.terminated`` from the exit record, the termination message file or the log tail."""
        res = c.result or {}
        code = int(res.get("exitCode", 137))
        message = res.get("message") or _read_limited(c.dir / "termination-log", MAX_MESSAGE_BYTES)
        container = next((x for x in (run.pod.get("spec") or {}).get("containers", []) if x["name"] == c.name), {})
        if not message.strip() and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = _log_tail(c.dir / "log")
        state = {
            "exitCode": code, "reason": res.get("reason") or ("Completed" if code == 0 else "Error"),
            "startedAt": res.get("startedAt") or c.started_at, "finishedAt": res.get("finishedAt") or now(),
            "containerID": f"ftbench-local://{run.uid}/{c.name}",
        }  # fmt: skip
        if message:
            state["message"] = message
        return state

    def report_finished(self, run: PodRun) -> None:
        states = {c.name: self.terminated_state(run, c) for c in run.containers.values()}
        phase = "Succeeded" if all(s["exitCode"] == 0 for s in states.values()) else "Failed"
        statuses = [
            {**self._container_base(run, name), "ready": False, "started": False, "state": {"terminated": s}}
            for name, s in states.items()
        ]
        status: Obj = {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": run.ip, "podIPs": [{"ip": run.ip}], "startTime": run.start_time,
            "conditions": self._conditions(False, "PodCompleted"), "containerStatuses": statuses,
        }  # fmt: skip
        if any(s["reason"] == "KubeletRestarted" for s in states.values()):
            status.update(reason="KubeletRestarted", message="the local kubelet restarted and lost the pod's process")
        self._patch_status({"uid": run.uid, "namespace": run.namespace, "name": run.name}, status)
        run.reported = phase
        run.save()
        log.info(
            "pod %s/%s %s (%s)",
            run.namespace,
            run.name,
            phase,
            ", ".join(f"{n}: exit {s['exitCode']}" for n, s in states.items()),
        )

    def check_processes(self) -> None:
        """Collect exit records of containers that ended; report pods whose containers all ended."""
        with self._lock:
            runs = [r for r in self.runs.values() if r.reported not in TERMINAL and not r.deleting]
        for run in runs:
            for c in run.containers.values():
                if c.result is not None:
                    continue
                alive = c.alive()  # before reading exit.json: podrun writes it before it exits
                c.result = c.read_exit()
                if c.result is None and not alive:
                    c.result = {
                        "exitCode": 137,
                        "reason": "Error",
                        "message": "the container's process was killed",
                        "startedAt": c.started_at,
                        "finishedAt": now(),
                    }
            if run.containers and all(c.result for c in run.containers.values()):
                self.report_finished(run)

    # -- hosts -----------------------------------------------------------------------------------

    def refresh_hosts(self, only: str | None = None, *, force: bool = False) -> None:
        """Rewrite the hosts files of running pods (every 2 s at most, unless ``force``)."""
        t = time.monotonic()
        if not force and t - getattr(self, "_hosts_at", 0.0) < 2.0:
            return
        self._hosts_at = t
        with self._lock:
            active = [r for r in self.runs.values() if r.reported not in TERMINAL and not r.deleting]
        for ns in sorted({r.namespace for r in active if only in (None, r.namespace)}):
            services = (self.rest.call("GET", f"/api/v1/namespaces/{ns}/services", missing_ok=True) or {}).get(
                "items", []
            )
            in_ns = [r for r in active if r.namespace == ns]
            content = H.hosts_content([r.address for r in in_ns], services)
            for r in in_ns:
                H.write_in_place(r.dir / "hosts", content)

    # -- deletion --------------------------------------------------------------------------------

    def _terminate(self, run: PodRun, grace: float) -> None:
        """SIGTERM the containers' process groups, SIGKILL what is left after ``grace`` seconds."""
        live = [c for c in run.containers.values() if c.alive()]
        for c in live:
            _kill_group(c.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + max(grace, 0.5)
        while time.monotonic() < deadline and any(c.alive() for c in live):
            time.sleep(0.05)
        for c in live:
            if c.alive():
                _kill_group(c.pid or 0, signal.SIGKILL)
            if c.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.popen.wait(5)

    def _delete(self, run: PodRun, grace: float) -> None:
        """Deletion thread: stop the containers, then let the API server drop the pod."""
        try:
            self._terminate(run, grace)
            self._confirm_deletion({"uid": run.uid, "namespace": run.namespace, "name": run.name})
        except Exception:
            log.exception("deleting %s/%s", run.namespace, run.name)
            run.deleting = False  # the next sync retries
            return
        self._forget(run)
        log.info("pod %s/%s deleted", run.namespace, run.name)

    def _confirm_deletion(self, meta: Obj) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        self.rest.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body, missing_ok=True)

    def _forget(self, run: PodRun) -> None:
        with self._lock:
            self.runs.pop(run.uid, None)
        self._notes.pop(run.uid, None)
        shutil.rmtree(run.dir, ignore_errors=True)


def _read_limited(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - FALLBACK_LOG_BYTES * 4))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()[-FALLBACK_LOG_LINES:]
    return "\n".join(lines)[-FALLBACK_LOG_BYTES:]


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ftbench.devcluster.kubelet", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True, help="kubeconfig of the cluster (e.g. the dev control plane's)")
    p.add_argument("--node-name", default="ftbench-local", help="name of the Node object (default ftbench-local)")
    p.add_argument(
        "--state-dir", required=True, help="pods' files, logs, pids, PVC directories (<state-dir>/pvc/<claim>)"
    )
    p.add_argument("--bin-dir", help="put first on the containers' PATH (default: this Python's bin dir)")
    p.add_argument("--label", action="append", type=_label, default=[], metavar="K=V", help="node label (repeatable)")
    p.add_argument("--gpus", type=int, help=f"{GPU_RESOURCE} capacity to advertise (default: local GPUs)")
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="host variable to pass into containers (repeatable)",
    )
    p.add_argument(
        "--namespace-label",
        action="append",
        type=_label,
        default=[],
        metavar="K=V",
        help="only bind pods of namespaces with these labels",
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between pod syncs (default 0.5)")
    p.add_argument("--no-isolation", action="store_true", help="no mount namespaces: run commands on the host's paths")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    kubelet = LocalKubelet(
        Rest.from_kubeconfig(args.kubeconfig), args.node_name, args.state_dir, bin_dir=args.bin_dir,
        labels=dict(args.label), gpus=args.gpus, pass_env=tuple(args.pass_env),
        namespace_labels=dict(args.namespace_label), interval=args.interval,
        isolate=not args.no_isolation,
    )  # fmt: skip
    kubelet.run(stop)
    log.info("stopped; containers keep running (a restarted kubelet adopts them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
