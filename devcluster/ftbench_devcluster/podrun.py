"""Run one container of a pod for the local kubelet: mounts, hostname, then the command.

The local kubelet (``ftbench_devcluster.kubelet``) starts this module once per container as
``unshare --mount --uts --propagation private -- python -m ftbench_devcluster.podrun DIR``.
``DIR/spec.json`` says what to run and what to mount; this process builds the container's view of
the filesystem, runs the command as its child and writes ``DIR/exit.json`` when it ends.

Why a separate process per container rather than threads in the kubelet:

- The mount and UTS namespaces are per process. Inside them the volumes, ``/etc/hosts`` and the
  termination-message file can sit at the pod's real paths without touching the host.
- It outlives the kubelet: a restarted kubelet finds the container still running (pid file) or
  finished (``exit.json``), so a kubelet restart neither loses nor duplicates a pod.

How the view is built without ever creating anything on the host: a fresh tmpfs becomes the
new root, every top-level entry of ``/`` is bind-mounted (recursively) into it, and whenever a
mount point does not exist (``/etc/ftbench``, ``/dev/termination-log``, ``/data``), the
directory that should contain it is *shadowed*: a tmpfs replaces it that holds bind mounts of all
its original entries plus the new mount point. Then the process chroots into the new root.
Without isolation (``spec.json: isolate false``: not root and no user namespaces) mounts are
skipped and the command runs on the host's filesystem.

Image mode (``spec.json: rootfs``, the kubelet's ``--images``): the new root is an overlay whose
lower layer is the image's root file system (shared, never written) and whose upper layer is this
container's own directory, so the container may write anywhere, as in a container runtime, and
its writes vanish with the pod. ``/proc``, ``/dev`` and ``/sys`` and the host's resolver are bound
in (host network, as the pod IPs are host addresses); no shadowing is needed since every mount
point is created in the upper layer. The command then runs as ``spec.json: user`` (uid, gid,
extra groups).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import posixpath
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
# Bound from the host into an image's root: what a runtime provides (a private /proc comes from
# ``unshare --mount-proc``; /dev and /sys as the host's, since the pod shares the host's devices).
HOST_FILESYSTEMS = ("/proc", "/dev", "/sys")
HOST_FILES = ("/etc/resolv.conf",)

SPEC_FILE = "spec.json"
EXIT_FILE = "exit.json"
_MAX_SYMLINK_HOPS = 40


def now() -> str:
    """RFC 3339 in UTC with a Z, the format of Kubernetes timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Mount:
    """One mount in the container's view: ``source`` (a host path, ignored for tmpfs) at ``target``."""

    target: str
    source: str = ""
    kind: str = "bind"  # "bind" or "tmpfs"
    read_only: bool = False
    is_file: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Mount:
        return cls(
            target=data["target"],
            source=data.get("source", ""),
            kind=data.get("kind", "bind"),
            read_only=bool(data.get("readOnly", False)),
            is_file=bool(data.get("isFile", False)),
        )


class _Libc:
    """mount(2) through ctypes: a few hundred bind mounts per pod are too slow as `mount` processes."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

    def mount(self, source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        res = self._libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        if res != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {source} -> {target} ({fstype or 'bind'}): {os.strerror(err)}")


class RootBuilder:
    """Builds the container's root filesystem under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, stage: Path) -> None:
        self.root = root
        self.stage = stage
        self.libc = _Libc()
        # In-container directories backed by something of ours (tmpfs, a volume): creating a mount
        # point inside them does not touch the host.
        self.ours: set[str] = {"/"}
        self.writable_root = False  # image mode: every directory is ours (the overlay's upper layer)

    def build_image(self, lower: str, layers: Path, mounts: list[Mount]) -> None:
        """An overlay of the image's root (``lower``) with ``layers``/upper, then the mounts."""
        upper, work = layers / "upper", layers / "work"
        for d in (self.root, upper, work):
            d.mkdir(parents=True, exist_ok=True)
        self.libc.mount("overlay", str(self.root), "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
        self.writable_root = True
        host = [Mount(target=p, source=p) for p in HOST_FILESYSTEMS]
        host += [Mount(target=p, source=p, is_file=True) for p in HOST_FILES if os.path.exists(p)]
        for m in host:  # the host's own: a mount point under them is made in a shadow, never there
            self.add(m, ours=False)
        for m in sorted(mounts, key=lambda m: posixpath.normpath(m.target).count("/")):
            self.add(m)

    def build(self, mounts: list[Mount]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.libc.mount("tmpfs", str(self.root), "tmpfs", 0, "mode=755")
        for entry in sorted(os.listdir("/")):
            self._mirror(posixpath.join("/", entry), self.root / entry)
        # Parents before children, so a volume mounted inside another volume lands inside it.
        for m in sorted(mounts, key=lambda m: posixpath.normpath(m.target).count("/")):
            self.add(m)

    def add(self, m: Mount, *, ours: bool = True) -> None:
        """Mount ``m``; a directory mount is then ours to make mount points in, unless it is one of
        the host's file systems (``ours=False``: /dev bound in is the host's /dev)."""
        outer = self._mountpoint(m.target, is_file=m.is_file)
        if m.kind == "tmpfs":
            self.libc.mount("tmpfs", str(outer), "tmpfs", 0, "mode=1777")
        else:
            self.libc.mount(m.source, str(outer), None, MS_BIND | MS_REC)
        if m.read_only:
            self.libc.mount("none", str(outer), None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        if ours and not m.is_file:
            self.ours.add(posixpath.normpath(m.target))

    def _in_overlay(self, inner: str) -> bool:
        """Whether ``inner`` lies in the image's overlay (ours to write), not in a host file
        system bound into it: a mount point under /dev must not be created on the host's /dev."""
        under_host = any(inner == h or inner.startswith(h + "/") for h in HOST_FILESYSTEMS)
        return self.writable_root and not under_host

    def enter(self) -> None:
        os.chroot(self.root)
        os.chdir("/")

    def _mirror(self, src: str, dst: Path) -> None:
        """Make ``dst`` show ``src``: a copy of a symlink, a recursive bind mount otherwise."""
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            dst.mkdir()
            self.libc.mount(src, str(dst), None, MS_BIND | MS_REC)
        elif os.path.exists(src):
            dst.touch()
            self.libc.mount(src, str(dst), None, MS_BIND | MS_REC)

    def _shadow(self, inner: str) -> None:
        """Replace directory ``inner`` of the new root by a tmpfs that mirrors its entries."""
        outer = self._outer(inner)
        mode = os.stat(outer).st_mode & 0o7777
        self.stage.mkdir(parents=True, exist_ok=True)
        self.libc.mount("tmpfs", str(self.stage), "tmpfs", 0, f"mode={mode:o}")
        for entry in sorted(os.listdir(outer)):
            self._mirror(str(outer / entry), self.stage / entry)
        self.libc.mount(str(self.stage), str(outer), None, MS_MOVE)
        self.ours.add(inner)

    def _outer(self, inner: str) -> Path:
        return self.root / inner.lstrip("/")

    def _mountpoint(self, target: str, *, is_file: bool) -> Path:
        """The path under the new root to mount ``target`` on, created (in tmpfs) when missing.

        Symlinks are followed inside the new root (``/var/run`` -> ``/run``), as the kernel would
        after the chroot.
        """
        parts = [p for p in posixpath.normpath(target).split("/") if p]
        cur, i, hops = "/", 0, 0
        while i < len(parts):
            inner = posixpath.join(cur, parts[i])
            outer = self._outer(inner)
            if outer.is_symlink():
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise OSError(f"too many symlinks resolving {target}")
                link = os.readlink(outer)
                rest = posixpath.join(link if link.startswith("/") else posixpath.join(cur, link), *parts[i + 1 :])
                parts = [p for p in posixpath.normpath(rest).split("/") if p]
                cur, i = "/", 0
                continue
            if not os.path.lexists(outer):
                if cur not in self.ours and not self._in_overlay(cur):
                    self._shadow(cur)
                if is_file and i == len(parts) - 1:
                    outer.touch()
                else:
                    outer.mkdir()
                    self.ours.add(inner)
            cur, i = inner, i + 1
        return self._outer(cur)


def _write_exit(dir_fd: int, record: dict[str, Any]) -> None:
    """Atomically write exit.json through a directory fd opened before the chroot."""
    tmp = EXIT_FILE + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.rename(tmp, EXIT_FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def run(container_dir: Path) -> int:
    spec = json.loads((container_dir / SPEC_FILE).read_text())
    dir_fd = os.open(container_dir, os.O_RDONLY | os.O_DIRECTORY)
    started = now()
    try:
        if spec.get("isolate", False):
            builder = RootBuilder(container_dir / "rootfs", container_dir / "stage")
            mounts = [Mount.from_json(m) for m in spec.get("mounts", [])]
            if image_root := spec.get("rootfs"):
                builder.build_image(image_root, container_dir / "layers", mounts)
            else:
                builder.build(mounts)
            builder.enter()
            if hostname := spec.get("hostname"):
                socket.sethostname(hostname)
        cwd = spec.get("workingDir") or "/"
        os.makedirs(cwd, exist_ok=True)
    except OSError as err:
        print(f"ftbench local kubelet: cannot set up the container: {err}", file=sys.stderr, flush=True)
        _write_exit(
            dir_fd, {"exitCode": 128, "reason": "ContainerCannotRun", "startedAt": started, "finishedAt": now()}
        )
        return 128
    try:
        who = spec.get("user")
        identity: dict[str, Any] = (
            {"user": who["uid"], "group": who["gid"], "extra_groups": who.get("groups", [])} if who else {}
        )
        proc = subprocess.Popen(spec["argv"], env=spec.get("env", {}), cwd=cwd, stdin=subprocess.DEVNULL, **identity)
    except OSError as err:
        # What a container runtime reports for a missing executable: exit 127 / 126.
        print(f"ftbench local kubelet: cannot run {spec['argv'][0]!r}: {err}", file=sys.stderr, flush=True)
        code = 127 if isinstance(err, FileNotFoundError) else 126
        _write_exit(
            dir_fd, {"exitCode": code, "reason": "ContainerCannotRun", "startedAt": started, "finishedAt": now()}
        )
        return code

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    code = proc.wait()
    # A child killed by a signal reads as 128 + signal, as in a container.
    exit_code = 128 - code if code < 0 else code
    _write_exit(dir_fd, {"exitCode": exit_code, "startedAt": started, "finishedAt": now()})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ftbench_devcluster.podrun CONTAINER_DIR", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
