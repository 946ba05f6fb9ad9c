"""Where the control plane's binaries (etcd, kube-apiserver, kube-controller-manager) come from:
``$KUBEBUILDER_ASSETS``, the cache ``hack/build-control-plane.sh`` fills, or ``$PATH``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ftbench.contracts.env import cache_root

K8S_VERSION = "1.20.2"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message carries the relevant log lines)."""


class BinariesNotFoundError(ControlPlaneError):
    """etcd / kube-apiserver / kube-controller-manager are not installed."""


def cache_bin_dir() -> Path:
    """Where ``hack/build-control-plane.sh`` puts the binaries."""
    return cache_root() / f"k8s-{K8S_VERSION}" / "bin"


def find_binaries(names: tuple[str, ...] = BINARIES) -> dict[str, Path]:
    """Locate each binary: ``$KUBEBUILDER_ASSETS`` first, then the ftbench cache, then ``$PATH``.

    The lookup is per binary because envtest's asset directories (``setup-envtest``) ship etcd and
    kube-apiserver but no kube-controller-manager; that one then comes from the cache or PATH.
    """
    dirs: list[Path] = []
    if assets := os.environ.get("KUBEBUILDER_ASSETS"):
        dirs.append(Path(assets))
    dirs.append(cache_bin_dir())
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        candidates = [d / name for d in dirs]
        if on_path := shutil.which(name):
            candidates.append(Path(on_path))
        hit = next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
        if hit is None:
            missing.append(name)
        else:
            found[name] = hit
    if missing:
        raise BinariesNotFoundError(
            f"missing {', '.join(missing)} (searched $KUBEBUILDER_ASSETS, {cache_bin_dir()}, $PATH); "
            "run hack/build-control-plane.sh or point KUBEBUILDER_ASSETS at envtest binaries"
        )
    return found
