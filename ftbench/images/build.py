"""Build the images with buildah, skipping each one whose content key is current.

The two local bases stand in for what a registry would serve (``python:3.11-slim``,
``pytorch/pytorch``): a Debian root file system from ``mmdebstrap`` (Debian's Python 3.11), and
on it the machine's CPU torch wheel. Both carry the host's CA bundle and point pip at it: the
package index may sit behind a TLS proxy with a private CA, which pip inside a build would not
trust otherwise. The Dockerfiles themselves are built unchanged, with the bases as build args.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ftbench.contracts import images as C
from ftbench.engines.releases import load_releases
from ftbench.images import plan, store

log = logging.getLogger("ftbench.images")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Bump to rebuild the bases when the recipe below changes in a way the key does not see.
BASE_RECIPE = "1"


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part + b"\0")
    return h.hexdigest()[:32]


def _current(ref: str, key: str) -> bool:
    return store.label(ref, C.CACHE_KEY_LABEL) == key


@contextlib.contextmanager
def _working(*from_args: str) -> Iterator[str]:
    """A buildah working container, removed when the step fails before its commit."""
    container = store.buildah("from", *from_args).strip()
    try:
        yield container
    except BaseException:  # cleanup on any way out (Ctrl-C included), then the error goes on
        with contextlib.suppress(store.ImageError):
            store.buildah("rm", container)
        raise


def _commit(container: str, ref: str, key: str, env: dict[str, str]) -> None:
    """Set the base's environment and cache key, commit it as ``ref``, drop the container."""
    settings = [a for k, v in sorted(env.items()) for a in ("--env", f"{k}={v}")]
    store.buildah("config", *settings, "--label", f"{C.CACHE_KEY_LABEL}={key}", container)
    store.buildah("commit", "--rm", container, ref, timeout=1800)


def python_base() -> str:
    """Debian's Python 3.11 (mmdebstrap, minbase) with the host's CA bundle for pip; its key."""
    ca = CA_BUNDLE.read_bytes() if CA_BUNDLE.exists() else b""
    recipe = json.dumps([BASE_RECIPE, plan.DEBIAN_SUITE, plan.DEBIAN_PACKAGES, plan.BASE_ENV]).encode()
    key = _sha(recipe, ca)
    if _current(plan.PYTHON_BASE, key):
        return key
    with tempfile.TemporaryDirectory(prefix="ftbench-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        include = ",".join(plan.DEBIAN_PACKAGES)
        subprocess.run(
            ["mmdebstrap", "--variant=minbase", f"--include={include}", plan.DEBIAN_SUITE, str(tar)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        with _working("scratch") as container:
            store.buildah("add", container, str(tar), "/")
            env = dict(plan.BASE_ENV)
            if ca:
                store.buildah("copy", container, str(CA_BUNDLE), str(CA_BUNDLE))
                env["PIP_CERT"] = str(CA_BUNDLE)
            store.buildah("config", "--cmd", "python3", container)
            _commit(container, plan.PYTHON_BASE, key, env)
    return key


def torch_base(python_key: str) -> str:
    """The Python base plus the machine's CPU torch wheel (pip's find-links here); its key."""
    version = load_releases().cpu_torch
    with tempfile.TemporaryDirectory(prefix="ftbench-torch-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"torch=={version}", "-d", tmp], check=True
        )
        wheel = next(Path(tmp).glob("torch-*.whl"))
        key = _sha(BASE_RECIPE.encode(), python_key.encode(), wheel.name.encode(), str(wheel.stat().st_size).encode())
        ref = plan.torch_base()
        if _current(ref, key):
            return key
        with _working("--pull-never", plan.PYTHON_BASE) as container:
            store.buildah("copy", container, str(wheel), f"/tmp/{wheel.name}")
            store.buildah(
                "run", "--isolation", "chroot", container, "--",
                "sh", "-c", f"pip install /tmp/{wheel.name} && rm /tmp/{wheel.name}", timeout=1800,
            )  # fmt: skip
            _commit(container, ref, key, {})
    return key


def build(image: plan.ImageBuild) -> bool:
    """``buildah bud`` the Dockerfile unless the image is current; True when it was built."""
    if _current(image.ref, image.key):
        return False
    done = subprocess.run(store.buildah_cmd(*image.bud_args()), cwd=plan.REPO, check=False)
    if done.returncode != 0:
        raise store.ImageError(f"building {image.ref} from {image.dockerfile} failed (exit {done.returncode})")
    return True


def build_all(releases: Sequence[str] | None = None, *, only: Sequence[str] = ()) -> list[plan.ImageBuild]:
    """Both bases, then every planned image (``only``: those whose name contains one of these);
    then, when one was rebuilt, what it left behind is pruned. One build at a time (a lock on the
    storage; test sessions build concurrently): working containers of a concurrent build would be
    pruned."""
    with _build_lock():
        return _build_all(releases, only)


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """An exclusive lock beside buildah's storage, held for a whole build."""
    path = Path(store.buildah("info", "--format", "{{.store.GraphRoot}}").strip() or tempfile.gettempdir())
    with open(path / "ftbench-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_all(releases: Sequence[str] | None, only: Sequence[str]) -> list[plan.ImageBuild]:
    t0 = time.monotonic()
    python_key = python_base()
    log.info("%s ready (%.0f s)", plan.PYTHON_BASE, time.monotonic() - t0)
    t0 = time.monotonic()
    torch_key = torch_base(python_key)
    log.info("%s ready (%.0f s)", plan.torch_base(), time.monotonic() - t0)
    keys = {plan.PYTHON_BASE: python_key, plan.torch_base(): torch_key}
    wanted = [b for b in plan.builds(keys, releases=releases) if not only or any(o in b.ref for o in only)]
    rebuilt = False
    for image in wanted:
        t0 = time.monotonic()
        built = build(image)
        rebuilt |= built
        log.info("%s: %s (%.0f s)", image.ref, "built" if built else "current", time.monotonic() - t0)
    if rebuilt:
        store.prune()
    return wanted
