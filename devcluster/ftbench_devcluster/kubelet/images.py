"""Image mode: what a container gets from its image, as a container runtime would give it.

In image mode (``--images``) a container does not run the host's commands: ``podrun`` lays an
overlay over the image's root file system (a buildah container of the image, mounted once and
shared read-only; each container writes into its own upper layer) and runs there. This module
turns the image's OCI config and the pod spec into what Kubernetes and the runtime decide:

- the command: ``command`` replaces the ENTRYPOINT and drops the CMD, ``args`` replaces the CMD;
- the environment: the image's ``Env`` under the pod's (``HOME`` from the user's passwd entry
  when the image sets none, ``/`` without one);
- the working directory: ``workingDir``, else the image's;
- the user: ``runAsUser``/``runAsGroup`` of the container, else of the pod, else the image's
  ``USER``; ``runAsNonRoot`` refuses a container that would run as root, as the kubelet does
  (``CreateContainerConfigError``); ``fsGroup`` and ``supplementalGroups`` become extra groups.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from ftbench.contracts.kube import Obj
from ftbench.images import store
from ftbench_devcluster.podspec import PodConfigError

# What a runtime puts on PATH when the image sets none (containerd's and CRI-O's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    """An image as the kubelet uses it: its root file system and its OCI config."""

    ref: str
    rootfs: Path
    config: Obj = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        pairs = (item.partition("=") for item in self.config.get("Env") or [])
        env = {k: v for k, _, v in pairs}
        env.setdefault("PATH", DEFAULT_PATH)
        return env

    def argv(self, container: Obj) -> list[str]:
        """Unexpanded command line: Kubernetes' rules for command/args over ENTRYPOINT/CMD."""
        if container.get("command"):
            return [*container["command"], *(container.get("args") or [])]
        tail = container.get("args") or self.config.get("Cmd") or []
        return [*(self.config.get("Entrypoint") or []), *tail]


def load(ref: str) -> Image:
    """The image from buildah's storage; a missing one is the pod's configuration error."""
    try:
        return Image(ref, store.rootfs(ref), store.config(ref))
    except store.ImageError as err:
        raise PodConfigError(f"image {ref!r}: {err}") from err


def _table(rootfs: Path, name: str) -> list[list[str]]:
    """The entries of the image's /etc/passwd or /etc/group, split on ':'."""
    with contextlib.suppress(OSError):
        return [line.split(":") for line in (rootfs / "etc" / name).read_text().splitlines() if line.count(":") >= 2]
    return []


def _id(text: str, rootfs: Path, table: str) -> int:
    """A numeric id as is; a name looked up in the image's ``table`` (passwd or group)."""
    if text.isdigit():
        return int(text)
    for entry in _table(rootfs, table):
        if entry[0] == text:
            return int(entry[2])
    raise PodConfigError(f"image user {text!r} is not in the image's /etc/{table}")


@dataclass(frozen=True)
class User:
    """Who a container's process runs as, and its HOME when the image sets none."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    home: str = "/"


def user(pod: Obj, container: Obj, image: Image) -> User:
    """The process identity Kubernetes gives ``container`` of ``pod`` running ``image``."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    sc = container.get("securityContext") or {}
    name, _, group_name = str(image.config.get("User") or "0").partition(":")
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    uid = _id(name, image.rootfs, "passwd") if uid is None else int(uid)
    entry = next((p for p in _table(image.rootfs, "passwd") if p[2] == str(uid) and len(p) > 5), None)
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if gid is None:
        gid = _id(group_name, image.rootfs, "group") if group_name else int(entry[3]) if entry else 0
    if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) and uid == 0:
        raise PodConfigError(f"container {container['name']} has runAsNonRoot and image will run as root")
    extra = [pod_sc["fsGroup"]] if pod_sc.get("fsGroup") is not None else []
    extra += pod_sc.get("supplementalGroups") or []
    return User(uid, int(gid), tuple(dict.fromkeys(int(g) for g in extra)), entry[5] if entry else "/")
