"""buildah's local storage: what it holds, the labels of an image, a root file system to run.

Every call names the storage driver (``STORAGE_DRIVER``), so the build, the kubelet and the tests
look at the same images whatever the machine's storage.conf says.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ftbench.contracts import images as C

# Working containers the kubelet mounts as the lower layer of its pods' root file systems.
ROOTFS_CONTAINER_PREFIX = "ftbench-rootfs-"
# buildah's names for the working containers of builds (``<image>-working-container[-N]``).
WORKING_CONTAINER_SUFFIXES = tuple(["-working-container", *(f"-working-container-{n}" for n in range(1, 10))])


class ImageError(RuntimeError):
    """buildah is missing, an image is not in the local storage, or buildah failed."""


def buildah_cmd(*args: str) -> list[str]:
    return ["buildah", "--storage-driver", C.STORAGE_DRIVER, *args]


def available() -> bool:
    return shutil.which("buildah") is not None


def buildah(*args: str, timeout: float = 600) -> str:
    """Run buildah; its stdout, or ImageError with its stderr."""
    if not available():
        raise ImageError("buildah is not installed (apt-get install buildah; see docs/images.md)")
    done = subprocess.run(buildah_cmd(*args), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ImageError(f"buildah {' '.join(args[:3])}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def inspect(ref: str) -> dict[str, Any] | None:
    """The image's buildah inspect document, None when the storage has no such image."""
    if not available():
        return None
    done = subprocess.run(
        buildah_cmd("inspect", "--type", "image", ref), capture_output=True, text=True, timeout=120, check=False
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def config(ref: str) -> dict[str, Any]:
    """The OCI config of an image (Env, User, Entrypoint, Cmd, WorkingDir, Labels)."""
    doc = inspect(ref)
    if doc is None:
        raise ImageError(f"image {ref} is not in the local storage (hack/build-images.sh builds it)")
    return dict(doc["OCIv1"].get("config") or {})


def label(ref: str, key: str) -> str | None:
    doc = inspect(ref)
    if doc is None:
        return None
    return ((doc["OCIv1"].get("config") or {}).get("Labels") or {}).get(key)


def rootfs(ref: str) -> Path:
    """A mounted root file system of the image's current ID, created once and shared read-only.

    Callers must not write into it: the kubelet lays an overlay over it per container. The
    container is named after the image ID, so a rebuilt image gets a fresh one.
    """
    doc = inspect(ref)
    if doc is None:
        raise ImageError(f"image {ref} is not in the local storage (hack/build-images.sh builds it)")
    name = ROOTFS_CONTAINER_PREFIX + str(doc["FromImageID"])[:16]
    listed = json.loads(buildah("containers", "--json") or "[]") or []
    if not any(c.get("containername") == name for c in listed):
        # Another kubelet may have created it meanwhile: then the mount below works all the same.
        with contextlib.suppress(ImageError):
            buildah("from", "--pull-never", "--name", name, ref)
    return Path(buildah("mount", name).strip())


def prune() -> None:
    """Drop what rebuilt images leave behind in the (full-copy, vfs) storage: the kubelet's root
    file system containers of images no longer tagged, leftover working containers, then the
    untagged images. A pod still running on such an old image loses its root file system.

    `buildah images` shortens IDs to 12 characters unless told not to, while `containers` gives
    them whole: compared short, every root file system looked stale, and a build in one test
    session pulled the root file system from under the pods of another (files vanished mid-import)."""
    listed = json.loads(buildah("images", "--json", "--no-trunc") or "[]") or []
    tagged = {str(i["id"]).removeprefix("sha256:") for i in listed if i.get("names")}
    for c in json.loads(buildah("containers", "--json") or "[]") or []:
        name = str(c.get("containername", ""))
        stale_rootfs = name.startswith(ROOTFS_CONTAINER_PREFIX) and str(c.get("imageid")) not in tagged
        if stale_rootfs or name.endswith(WORKING_CONTAINER_SUFFIXES):
            with contextlib.suppress(ImageError):
                buildah("rm", c["id"])
    with contextlib.suppress(ImageError):
        buildah("rmi", "--prune")
