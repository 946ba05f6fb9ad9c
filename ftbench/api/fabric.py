"""Which network a multi-node run uses, from the spec's enableRoce and the profile's fabric.

Before, every multi-node enableRoce run asked for RDMA devices (`roce.deviceResource`) whether or
not the cluster had any (its pods never scheduled, while the warning spoke of a TCP fallback), and
every other multi-node run got NCCL_IB_DISABLE=1, which forces an InfiniBand cluster onto TCP
sockets. Now the profile says what the nodes have (`fabric`) and one function each decides the
RoCE parts of the pods, NCCL's IB switch, the warning and the refusal (run.requireRoce).
"""

from __future__ import annotations

from typing import Literal

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec

Fabric = Literal["RoCE", "InfiniBand", "none", "unknown"]


def fabric_of(profile: ClusterProfile) -> Fabric:
    """The profile's fabric; auto is RoCE where roce.network is set, else unknown."""
    if profile.fabric != "auto":
        return profile.fabric
    return "RoCE" if profile.roce.network else "unknown"


def asks_roce(spec: FineTuneExperimentSpec) -> bool:
    """RoCE only applies across nodes (seed 002); single-node runs ignore enableRoce."""
    return spec.enable_roce and spec.number_nodes > 1


def uses_roce(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> bool:
    """The pods get RoCE's network, devices and NCCL settings: asked for, on a RoCE cluster."""
    return asks_roce(spec) and fabric_of(profile) == "RoCE"


def nccl_ib_disable(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """NCCL_IB_DISABLE for the pods, None to leave NCCL's own choice: 0 on RoCE runs; 1 where the
    nodes have no IB (fabric none) and on a RoCE cluster's runs without RoCE (deliberate TCP, not a
    probe of devices the pods were not given); unset on InfiniBand and where the fabric is unknown."""
    if spec.number_nodes < 2:
        return None
    if uses_roce(spec, profile):
        return "0"
    return "1" if fabric_of(profile) in ("none", "RoCE") else None


def roce_warning(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """What really happens to a multi-node enableRoce run that will not use RoCE here, or None.
    `ftbench validate` prints it and the operator sets condition RoceConfigured=False."""
    if not asks_roce(spec):
        return None
    fabric = fabric_of(profile)
    if fabric == "RoCE":
        if profile.roce.network:
            return None
        return (
            "enableRoce is true but the cluster profile sets no roce.network: the pods get RoCE's NCCL settings and "
            "devices but no RDMA network attachment, so NCCL will not use RoCE (it falls back to TCP sockets or "
            "fails); set roce.network in the cluster profile, or set enableRoce to false"
        )
    what = {
        "InfiniBand": "the cluster's fabric is InfiniBand, so NCCL runs over InfiniBand (IB verbs)",
        "none": "the cluster has no RDMA fabric (fabric none), so NCCL runs over TCP sockets (NCCL_IB_DISABLE=1)",
        "unknown": "the cluster profile describes no RoCE (fabric auto, no roce.network), so NCCL uses what the "
        "nodes have: InfiniBand where they have it, else TCP sockets",
    }[fabric]
    return (
        f"enableRoce is true but {what}; the pods request no RDMA devices and get no RoCE network. Set fabric RoCE "
        "and roce.network in the cluster profile where the nodes have RoCE, or run.requireRoce to refuse runs "
        "without it"
    )


def roce_refusal(spec: FineTuneExperimentSpec, profile: ClusterProfile) -> str | None:
    """run.requireRoce on a cluster without RoCE: refused before anything runs (it could only fail)."""
    if not (asks_roce(spec) and spec.run.require_roce) or uses_roce(spec, profile):
        return None
    fabric = fabric_of(profile)
    return (
        f"run.requireRoce refuses a run without RoCE, and this cluster has none (fabric {fabric}"
        f"{', no roce.network' if fabric == 'unknown' else ''}); set fabric RoCE and roce.network in the cluster "
        "profile where the nodes have RoCE, or remove run.requireRoce to run on the fabric there is"
    )
