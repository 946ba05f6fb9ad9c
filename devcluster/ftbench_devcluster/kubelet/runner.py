"""`LocalKubelet`: the sync loop that keeps the pods bound to the node in step with local processes.

Every ``interval`` seconds it lists the pods and, for each: binds a pending one that fits
(``scheduling``), starts a bound one it has not started (``containers``), reports a finished one
(``pod_status``), stops a deleted one and confirms the deletion, and forgets the pods that are
gone. What it started is kept on disk (``pod_state``), so a restarted kubelet adopts it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

from ftbench.contracts.kube import Obj
from ftbench.host.gpus import machine_gpu_count
from ftbench.host.procs import signal_group
from ftbench_devcluster import hosts as H
from ftbench_devcluster import podspec
from ftbench_devcluster.kubelet import containers, images, scheduling
from ftbench_devcluster.kubelet import pod_status as S
from ftbench_devcluster.kubelet.client import ApiObjects, Rest
from ftbench_devcluster.kubelet.node import Node
from ftbench_devcluster.kubelet.pod_state import ContainerRun, PodRun
from ftbench_devcluster.podrun import now

log = logging.getLogger("ftbench.kubelet")

KILL_GRACE_CAP = 10.0  # seconds; longer grace periods are not worth waiting for on a dev machine
HOSTS_REFRESH_SECONDS = 2.0  # how stale a hosts file may get when nothing forces a rewrite


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
        images: bool = False,
        resources: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
        bind: bool = True,
        pvc_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """`bind`: place the pending pods that fit this node (a one-node cluster without a scheduler); False
        leaves that to kube-scheduler. `pvc_dir`: claims' directories, shared by the nodes of one cluster."""
        self.rest = rest
        self.objects = ApiObjects(rest)
        self.node_name = node_name
        self.state_dir = Path(state_dir).resolve()
        self.pods_dir = self.state_dir / "pods"
        self.pvc_dir = Path(pvc_dir).resolve() if pvc_dir else self.state_dir / "pvc"
        self.bin_dir = str(bin_dir) if bin_dir else str(Path(sys.executable).parent)
        self.gpus = machine_gpu_count() if gpus is None else gpus
        self.bind = bind
        self.node = Node(rest, node_name, labels or {}, self.gpus, resources=resources, taints=taints)
        self.pass_env = pass_env
        self.namespace_labels = dict(namespace_labels or {})
        self.interval = interval
        self.prefix = containers.isolation_prefix() if isolate else None
        if isolate and self.prefix is None:
            log.warning(
                "no mount namespaces (unshare unavailable or not permitted): volumes and /etc/hosts are not mounted"
            )
        if images and self.prefix is None:
            raise RuntimeError("image mode needs mount namespaces (root, or unshare with user namespaces)")
        self.images = images
        self.runs: dict[str, PodRun] = {}
        self._notes: dict[str, str] = {}  # last Pending message per pod uid, to patch only changes
        self._hosts_at = 0.0  # monotonic time of the last hosts-file rewrite
        self._listed: list[Obj] = []  # the pods of the last sync's list
        self._octet = 100 + zlib.crc32(node_name.encode()) % 100  # 127.<octet>.x.y, per node name
        self._lock = threading.Lock()  # guards self.runs against the deletion threads

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: heartbeat the node, sync pods every ``interval`` seconds."""
        self.node.register()
        self.adopt()
        threading.Thread(target=self.node.heartbeat_loop, args=(stop,), name="heartbeat", daemon=True).start()
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
                    c.result = S.lost_on_restart_exit(c.started_at, now())
            self.runs[run.uid] = run
            log.info("adopted pod %s/%s (%s)", run.namespace, run.name, run.reported or "running")

    def _active(self) -> list[PodRun]:
        """Pods started and neither reported finished nor being deleted."""
        with self._lock:
            return [r for r in self.runs.values() if r.reported not in S.TERMINAL and not r.deleting]

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
        self._listed = pods  # what the other nodes run, for the hosts files (`_elsewhere`)
        mine: set[str] = set()
        served = self._served_namespaces()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node and served is not None and pod["metadata"]["namespace"] not in served:
                continue
            if not node:
                if self.bind:
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
        if not scheduling.ours_to_schedule(pod):
            return
        meta = pod["metadata"]
        reason = scheduling.unfit_reason(pod, self.node_name, self.node.labels, self.gpus, self._gpus_in_use())
        if reason:
            self._note(pod, reason, S.unschedulable_status(reason, now()))
            return
        self.rest.call(
            "POST",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
            scheduling.binding(pod, self.node_name),
            missing_ok=True,
        )
        log.info("bound %s/%s to %s", meta["namespace"], meta["name"], self.node_name)

    def _gpus_in_use(self) -> int:
        return sum(scheduling.gpu_request(r.pod) for r in self._active())

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
            if run.reported not in S.TERMINAL and run.all_ended():
                self.report_finished(run)
            return
        if status.get("phase") in S.TERMINAL:
            return
        if S.started_reported(status):  # started by a kubelet whose state dir we do not have
            self._patch_status(meta, S.lost_state_status())
            return
        try:
            self.start_pod(pod)
        except podspec.PodConfigError as err:
            self._note(pod, str(err), S.config_error_status(pod, str(err)))

    # -- starting ------------------------------------------------------------------------------

    def allocate_ip(self) -> str:
        with self._lock:
            used = {r.ip for r in self.runs.values()}
        for n in range(1, 256 * 254):
            ip = f"127.{self._octet}.{n // 254}.{n % 254 + 1}"
            if ip not in used:
                return ip
        raise RuntimeError("no free loopback address")

    def start_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        ip, start = self.allocate_ip(), now()
        # The pod as the downward API sees it once running.
        view = copy.deepcopy(pod)
        view.setdefault("status", {}).update({"podIP": ip, "podIPs": [{"ip": ip}], "hostIP": S.HOST_IP})
        directory = self.pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        hostname = H.pod_hostname(pod)
        run = PodRun(
            meta["namespace"], meta["name"], meta["uid"], directory, ip, hostname, spec.get("subdomain", ""),
            dict(meta.get("labels") or {}), start, pod=pod,
        )  # fmt: skip
        env = containers.base_env(self.rest.server, self.bin_dir, hostname, self.pass_env, host_paths=not self.images)
        try:
            volumes = podspec.prepare_volumes(view, directory / "volumes", self.pvc_dir, self.objects)
            if self.images:
                _open_writable_volumes(view, volumes)
            H.write_in_place(directory / "hosts", "")
            specs = {
                c["name"]: containers.container_spec(
                    view,
                    c,
                    run,
                    volumes,
                    env,
                    self.objects,
                    isolate=self.prefix is not None,
                    image=images.load(c.get("image", "")) if self.images else None,
                )
                for c in spec["containers"]
            }
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
            containers.spawn(run.containers[name], cspec, self.prefix)
        self._notes.pop(run.uid, None)
        log.info("started pod %s/%s at %s", run.namespace, run.name, ip)
        self._patch_status(meta, S.running_status(run, now()))
        run.reported = "Running"
        run.save()

    # -- status ----------------------------------------------------------------------------------

    def _patch_status(self, meta: Obj, status: Obj) -> None:
        # metadata.uid in a merge patch is a precondition: a recreated pod of the same name is not touched.
        body = {"metadata": {"uid": meta["uid"]}, "status": status}
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        self.rest.call("PATCH", path, body, patch=True, missing_ok=True)

    def report_finished(self, run: PodRun) -> None:
        at = now()
        states = {
            c.name: S.terminated_state(
                run, c, termination_message=c.termination_message(), log_tail=c.log_tail(), at=at
            )
            for c in run.containers.values()
        }
        status = S.finished_status(run, states, at)
        self._patch_status(run.meta, status)
        run.reported = status["phase"]
        run.save()
        exits = ", ".join(f"{n}: exit {s['exitCode']}" for n, s in states.items())
        log.info("pod %s/%s %s (%s)", run.namespace, run.name, run.reported, exits)

    def check_processes(self) -> None:
        """Collect exit records of containers that ended; report pods whose containers all ended."""
        for run in self._active():
            for c in run.containers.values():
                if c.result is not None:
                    continue
                alive = c.alive()  # before reading exit.json: podrun writes it before it exits
                c.result = c.read_exit()
                if c.result is None and not alive:
                    c.result = S.killed_exit(c.started_at, now())
            if run.all_ended():
                self.report_finished(run)

    # -- hosts -----------------------------------------------------------------------------------

    def refresh_hosts(self, only: str | None = None, *, force: bool = False) -> None:
        """Rewrite the hosts files of running pods (every ``HOSTS_REFRESH_SECONDS`` at most, unless
        ``force``): Services and pods of a namespace come and go."""
        t = time.monotonic()
        if not force and t - self._hosts_at < HOSTS_REFRESH_SECONDS:
            return
        self._hosts_at = t
        active = self._active()
        for ns in sorted({r.namespace for r in active if only in (None, r.namespace)}):
            listed = self.rest.call("GET", f"/api/v1/namespaces/{ns}/services", missing_ok=True) or {}
            in_ns = [r for r in active if r.namespace == ns]
            content = H.hosts_content([r.address for r in in_ns] + self._elsewhere(ns), listed.get("items", []))
            for r in in_ns:
                H.write_in_place(r.dir / "hosts", content)

    def _elsewhere(self, namespace: str) -> list[H.PodAddress]:
        """The namespace's running pods on the cluster's other nodes (a multi-node run's other ranks), from the
        sync's list of every pod."""
        other = [
            p
            for p in self._listed
            if p["metadata"]["namespace"] == namespace
            and (p.get("spec") or {}).get("nodeName") not in (None, self.node_name)
        ]
        return [a for p in other if (a := H.api_pod_address(p)) is not None]

    # -- deletion --------------------------------------------------------------------------------

    def _terminate(self, run: PodRun, grace: float) -> None:
        """SIGTERM the containers' process groups, SIGKILL what is left after ``grace`` seconds."""
        live = [c for c in run.containers.values() if c.alive()]
        for c in live:
            signal_group(c.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + max(grace, 0.5)
        while time.monotonic() < deadline and any(c.alive() for c in live):
            time.sleep(0.05)
        for c in live:
            if c.alive():
                signal_group(c.pid or 0, signal.SIGKILL)
            if c.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.popen.wait(5)

    def _delete(self, run: PodRun, grace: float) -> None:
        """Deletion thread: stop the containers, then let the API server drop the pod."""
        try:
            self._terminate(run, grace)
            self._confirm_deletion(run.meta)
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


def _open_writable_volumes(pod: Obj, volumes: dict[str, podspec.VolumeDir]) -> None:
    """Make emptyDirs and claims writable for the pod's non-root user (image mode).

    An emptyDir is mode 0777 on a kubelet; the PVC stand-ins are made like the local-path
    provisioner's volumes (0777 directories), so no fsGroup is needed, as on such a cluster.
    """
    for vol in pod["spec"].get("volumes") or []:
        local = volumes.get(vol["name"])
        if local is not None and not local.tmpfs and ("emptyDir" in vol or "persistentVolumeClaim" in vol):
            local.path.chmod(0o777)
