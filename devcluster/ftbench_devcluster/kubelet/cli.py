"""The kubelet's command line: one process per node, stopped by SIGTERM/SIGINT.

Containers keep running when the kubelet stops; a kubelet started again on the same
``--state-dir`` adopts them.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading

from ftbench_devcluster.kubelet.client import Rest
from ftbench_devcluster.kubelet.runner import LocalKubelet
from ftbench_devcluster.kubelet.scheduling import GPU_RESOURCE

log = logging.getLogger("ftbench.kubelet")
PROG = "python -m ftbench_devcluster.kubelet"


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _resource(text: str) -> tuple[str, str]:
    key, value = _label(text)
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?([KMGTPE]i?|m)?", value):
        raise argparse.ArgumentTypeError(f"expected NAME=QUANTITY (2, 512Gi, 500m), got {text!r}")
    return key, value


def _taint(text: str) -> dict[str, str]:
    """KEY[=VALUE]:EFFECT, as ``kubectl taint`` writes it."""
    pair, sep, effect = text.rpartition(":")
    key, _, value = pair.partition("=")
    if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise argparse.ArgumentTypeError(f"expected KEY[=VALUE]:NoSchedule|PreferNoSchedule|NoExecute, got {text!r}")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


def build_parser() -> argparse.ArgumentParser:
    from ftbench_devcluster import kubelet as package  # its docstring's first paragraph says what this is

    p = argparse.ArgumentParser(prog=PROG, description=(package.__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True, help="kubeconfig of the cluster (e.g. the dev control plane's)")
    p.add_argument("--node-name", default="ftbench-local", help="name of the Node object (default ftbench-local)")
    p.add_argument(
        "--state-dir", required=True, help="pods' files, logs, pids, PVC directories (<state-dir>/pvc/<claim>)"
    )
    p.add_argument("--bin-dir", help="put first on the containers' PATH (default: this Python's bin dir)")
    p.add_argument("--label", action="append", type=_label, default=[], metavar="K=V", help="node label (repeatable)")
    p.add_argument("--gpus", type=int, help=f"{GPU_RESOURCE} capacity to advertise (default: local GPUs)")
    p.add_argument(
        "--resource",
        action="append",
        type=_resource,
        default=[],
        metavar="NAME=QUANTITY",
        help="capacity to advertise, as a device plugin would (repeatable; e.g. nvidia.com/roce_gdr=2); cpu and "
        "memory replace this machine's, so a node can stand in for a cluster's larger one",
    )
    p.add_argument(
        "--taint",
        action="append",
        type=_taint,
        default=[],
        metavar="KEY[=VALUE]:EFFECT",
        help="node taint (repeatable)",
    )
    p.add_argument(
        "--no-bind",
        action="store_true",
        help="leave placement to a kube-scheduler (several nodes, affinity, taints); without it this kubelet binds "
        "the pending pods that fit it",
    )
    p.add_argument(
        "--pvc-dir",
        help="where PersistentVolumeClaims live (<pvc-dir>/<claim>; default <state-dir>/pvc): the nodes of one "
        "cluster share it, as they share a ReadWriteMany volume",
    )
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="host variable to pass into containers (repeatable)",
    )
    p.add_argument(
        "--namespace-label",
        action="append",
        type=_label,
        default=[],
        metavar="K=V",
        help="only bind pods of namespaces with these labels",
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between pod syncs (default 0.5)")
    p.add_argument("--no-isolation", action="store_true", help="no mount namespaces: run commands on the host's paths")
    p.add_argument(
        "--images",
        action="store_true",
        help="image mode: run each container in its image's root file system from buildah's storage "
        "(hack/build-images.sh), as its user, with its entrypoint and environment",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    kubelet = LocalKubelet(
        Rest.from_kubeconfig(args.kubeconfig), args.node_name, args.state_dir, bin_dir=args.bin_dir,
        labels=dict(args.label), gpus=args.gpus, pass_env=tuple(args.pass_env),
        namespace_labels=dict(args.namespace_label), interval=args.interval,
        isolate=not args.no_isolation, images=args.images, resources=dict(args.resource), taints=args.taint,
        bind=not args.no_bind, pvc_dir=args.pvc_dir,
    )  # fmt: skip
    kubelet.run(stop)
    log.info("stopped; containers keep running (a restarted kubelet adopts them)")
    return 0
