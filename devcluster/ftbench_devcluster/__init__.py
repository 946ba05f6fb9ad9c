"""A throwaway Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) on loopback.

Used by the integration tests (tests/conftest.py) and by ``ftbench dev up``. Stdlib only: the
binaries come from ``hack/build-control-plane.sh`` or from ``KUBEBUILDER_ASSETS``.
"""

from ftbench_devcluster.binaries import BINARIES, BinariesNotFoundError, ControlPlaneError, cache_bin_dir, find_binaries
from ftbench_devcluster.control_plane import ControlPlane

__all__ = [
    "BINARIES",
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "cache_bin_dir",
    "find_binaries",
]
