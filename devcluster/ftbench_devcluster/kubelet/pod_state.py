"""The pods a kubelet has started, as kept in its state dir so that a restarted kubelet adopts them.

Layout: ``<state-dir>/pods/<namespace>_<name>_<uid8>/pod.json`` for the pod, and per container
``containers/<name>/{pid,exit.json,log,termination-log}``. Containers outlive the kubelet by
design; a pid is trusted only while the process's command line still names its container
directory, because pids get reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ftbench.contracts.kube import Obj
from ftbench.host.procs import pid_alive, signal_group
from ftbench_devcluster import hosts as H
from ftbench_devcluster.podrun import EXIT_FILE

MAX_MESSAGE_BYTES = 4096  # what a kubelet keeps of a termination message
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048  # FallbackToLogsOnError: the log tail


def pid_runs(pid: int, marker: str) -> bool:
    """Whether ``pid`` is alive (not a zombie) and still the process we started (its command line
    names our container directory: pids get reused)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline.split("\0")


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
        return self.pid is not None and pid_runs(self.pid, str(self.dir))

    def read_exit(self) -> Obj | None:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads((self.dir / EXIT_FILE).read_text()))
        return None

    def termination_message(self) -> str:
        """The termination message file as far as a kubelet keeps it."""
        try:
            with (self.dir / "termination-log").open("rb") as f:
                return f.read(MAX_MESSAGE_BYTES).decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        """The end of the container's log (what ``FallbackToLogsOnError`` reports)."""
        try:
            with (self.dir / "log").open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - FALLBACK_LOG_BYTES * 4))
                data = f.read()
        except OSError:
            return ""
        lines = data.decode(errors="replace").splitlines()[-FALLBACK_LOG_LINES:]
        return "\n".join(lines)[-FALLBACK_LOG_BYTES:]


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

    @property
    def meta(self) -> Obj:
        """The metadata a status patch or a deletion names the pod by (uid as precondition)."""
        return {"uid": self.uid, "namespace": self.namespace, "name": self.name}

    def container_spec(self, name: str) -> Obj:
        """The pod spec's container ``name`` (empty if the pod is not known yet)."""
        return next((c for c in (self.pod.get("spec") or {}).get("containers", []) if c["name"] == name), {})

    def all_ended(self) -> bool:
        return bool(self.containers) and all(c.result for c in self.containers.values())

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


def kill_all_pods(state_dir: str | os.PathLike[str]) -> int:
    """SIGKILL every container process recorded under ``state_dir`` (``ftbench dev down``, tests).

    Containers outlive the kubelet by design; this is how to stop them for good. Returns how many
    were running.
    """
    killed = 0
    for pid_file in Path(state_dir).glob("pods/*/containers/*/pid"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads(pid_file.read_text())["pid"])
            if pid_runs(pid, str(pid_file.parent)):
                signal_group(pid, signal.SIGKILL)
                killed += 1
    return killed
