"""Nodes that look like the cluster a profile describes: the local kubelet's arguments for one of them.

A rig more lenient than the cluster hides what users meet first: pods that no node could take, a
toleration that matches no taint, a RoCE request on nodes without RDMA devices. So the end-to-end
rig's nodes carry what the profile says a node of its cluster has: the node selector's labels, the
GPU product label, the GPU and RDMA device resources, and a taint for each toleration the pods
bring (a toleration is only exercised where a taint needs it). Pure: the caller starts the kubelets.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftbench.api.profile import ClusterProfile


@dataclass(frozen=True)
class RigNode:
    """What one node offers: `gpus` of the profile's GPU resource (fake on a CPU machine: nothing runs
    on them, the scheduler counts them), labelled as `gpu_model` when one is given; `cpu` and `memory`
    the capacity of the cluster's node it stands for (the scheduler compares the pods' requests with it)."""

    gpus: int = 0
    gpu_model: str | None = None
    cpu: str | None = None  # the capacity of the node it stands for; None: this machine's
    memory: str | None = None

    def kubelet_args(self, profile: ClusterProfile) -> list[str]:
        """``--label``, ``--resource`` and ``--taint`` arguments of ``python -m ftbench_devcluster.kubelet``."""
        labels = dict(profile.node_selector)
        if self.gpu_model:
            labels[profile.gpu_node_label] = self.gpu_model
        resources = {profile.gpu_resource: str(self.gpus)}
        if profile.roce.network:
            resources[profile.roce.device_resource] = str(profile.roce.device_count)
        resources |= {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v}
        args = [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
        args += [a for k, n in resources.items() for a in ("--resource", f"{k}={n}")]
        return args + [a for taint in taints(profile) for a in ("--taint", taint)]


def taints(profile: ClusterProfile) -> list[str]:
    """``KEY[=VALUE]:EFFECT`` for each toleration of the profile that names a key (one without tolerates
    everything, so it needs no taint); an Exists toleration gets a taint with a value it ignores."""
    out = []
    for t in profile.tolerations:
        if not t.key:
            continue
        value = t.value if t.operator != "Exists" and t.value else ("present" if t.operator == "Exists" else "")
        out.append(f"{t.key}{'=' + value if value else ''}:{t.effect or 'NoSchedule'}")
    return out
