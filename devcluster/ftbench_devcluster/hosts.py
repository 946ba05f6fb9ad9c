"""Pod DNS for the local kubelet, through one ``/etc/hosts`` file per pod.

There is no cluster DNS on one machine, but the names the rendered pods use are all static
once the pods have addresses: the headless-Service pod names (``<hostname>.<subdomain>``, with
or without ``.<namespace>.svc[.cluster.local]``) that the Indexed Job rendering uses for rank 0,
the Service names the training operator creates for PyTorchJob pods (``<job>-master-0``), and
plain pod names. The kubelet writes all of them for every pod of a namespace (its own, and those
the API server reports running on the cluster's other nodes) into every pod's hosts file
(bind-mounted at ``/etc/hosts`` inside the pod) and rewrites the files when pods or Services change.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "job-name"

_PREAMBLE = """\
# Written by the ftbench local kubelet (pod DNS names of this namespace).
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
"""


@dataclass(frozen=True)
class PodAddress:
    """What the hosts file needs to know about one running pod."""

    name: str
    namespace: str
    ip: str
    hostname: str
    subdomain: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def pod_hostname(pod: Mapping[str, object]) -> str:
    """The pod's hostname as Kubernetes sets it.

    ``spec.hostname``, else the Indexed Job name ``<job>-<index>`` (what the Job controller of
    1.21+ puts into ``spec.hostname``; 1.20 does not, so the annotation is honoured here), else
    the pod name, cut to the 63 characters of a DNS label.
    """
    meta: dict = pod.get("metadata") or {}  # type: ignore[assignment]
    spec: dict = pod.get("spec") or {}  # type: ignore[assignment]
    if spec.get("hostname"):
        return str(spec["hostname"])
    index = (meta.get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
    job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
    if index is not None and job and spec.get("subdomain"):
        return f"{job}-{index}"[:63]
    return str(meta.get("name", ""))[:63].rstrip("-.")


def api_pod_address(pod: Mapping[str, Any]) -> PodAddress | None:
    """A running pod of another node as the API server reports it (its podIP), None before it has one or after
    it ended: the names cluster DNS would serve for it."""
    meta: dict[str, Any] = pod.get("metadata") or {}
    spec: dict[str, Any] = pod.get("spec") or {}
    status: dict[str, Any] = pod.get("status") or {}
    if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return None
    return PodAddress(
        meta["name"], meta["namespace"], status["podIP"], pod_hostname(pod), spec.get("subdomain", ""),
        dict(meta.get("labels") or {}),
    )  # fmt: skip


def pod_names(pod: PodAddress) -> list[str]:
    """All names that resolve to ``pod``: FQDN first (what `hostname -f` shows), then shorter ones."""
    names: list[str] = []
    if pod.subdomain:
        base = f"{pod.hostname}.{pod.subdomain}"
        names += [f"{base}.{pod.namespace}.svc.{CLUSTER_DOMAIN}", f"{base}.{pod.namespace}.svc", base]
    names += [pod.hostname, pod.name]
    return list(dict.fromkeys(names))


def service_names(service: str, namespace: str) -> list[str]:
    return [
        f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}",
        service,
    ]


def selects(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A Service's equality selector; an empty or missing selector selects nothing (as for Endpoints)."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def hosts_content(pods: Iterable[PodAddress], services: Iterable[Mapping[str, Any]] = ()) -> str:
    """The hosts file for one namespace.

    A Service name resolves to the first selected pod (sorted by pod name, so ``...-master-0``
    or index 0 wins): hosts files cannot hold the several addresses of a headless Service, and
    the single-address case (the PyTorchJob master Service) is the one the trainer needs.
    """
    ordered = sorted(pods, key=lambda p: p.name)
    lines = [_PREAMBLE]
    for pod in ordered:
        lines.append(f"{pod.ip}\t{' '.join(pod_names(pod))}\n")
    for svc in sorted(services, key=lambda s: str((s.get("metadata") or {}).get("name", ""))):
        meta: dict[str, Any] = svc.get("metadata") or {}
        spec: dict[str, Any] = svc.get("spec") or {}
        target = next(
            (p for p in ordered if p.namespace == meta.get("namespace") and selects(spec.get("selector"), p.labels)),
            None,
        )
        if target is not None:
            lines.append(f"{target.ip}\t{' '.join(service_names(meta['name'], meta['namespace']))}\n")
    return "".join(lines)


def write_in_place(path: Path, content: str) -> bool:
    """Overwrite ``path`` without replacing its inode; returns whether the content changed.

    The file is bind-mounted into running pods: a rename would leave them looking at the old
    inode, so the new content is written into the same file.
    """
    data = content.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with os.fdopen(fd, "r+b", closefd=False) as f:
            if f.read() == data:
                return False
            f.seek(0)
            f.write(data)
            f.truncate()
    finally:
        os.close(fd)
    return True
