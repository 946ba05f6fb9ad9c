"""`ftbench dev up|down|status`: a local cluster to try the operator without one.

`up` starts a real control plane (etcd, kube-apiserver, kube-controller-manager), installs the
FineTuneExperiment CRD, and runs the operator and the local kubelet (which runs the training
pods as local processes), all in the background under one supervisor; see
`ftbench_devcluster.devup`. The command comes with the test rig, a distribution of its own
(devcluster/ in the source tree, not in the ftbench wheel): it registers itself as a plugin of
ftbench's command line (entry point group `ftbench.commands`), so the product never imports the rig;
without the rig, `ftbench dev` is ftbench's stub that says how to install it (ftbench.cli.cmd_dev).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.extras import require
from ftbench_devcluster import devup


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dev", help="a local dev cluster: control plane, operator and a local kubelet (up/down/status)")
    p.add_argument(
        "--state-dir",
        type=Path,
        help="kubeconfig, logs, pods (default ~/.ftbench/dev: the test rig's DEFAULT_STATE_DIR)",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the cluster in the background and print how to use it")
    up.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="K=V",
        help="node label, e.g. nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
    )
    up.add_argument("--gpus", type=int, help="nvidia.com/gpu capacity of the node (default: the local GPUs)")
    up.add_argument("--no-operator", action="store_true", help="do not start the operator (run it yourself)")
    up.add_argument("--operator-cmd", help="command line of the operator (default: python -m ftbench_operator)")
    up.add_argument(
        "--no-seed-models", action="store_true", help="do not build the tiny model into the models PVC stand-in"
    )
    up.add_argument(
        "--images",
        action="store_true",
        help="run pods in their images (built by hack/build-images.sh) instead of as host processes",
    )
    up.add_argument("--timeout", type=float, help="seconds to wait for the cluster (default 180)")
    actions.add_parser("down", help="stop everything `dev up` started")
    actions.add_parser("status", help="show what runs (exit 1 if the cluster is not up)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "up":  # the kubelet talks through the kubernetes client, the operator is kopf
        require(
            "operator",
            "starting the kubelet and operator",
            ("kubernetes",) if args.no_operator else ("kubernetes", "kopf"),
        )
    state_dir = devup.DEFAULT_STATE_DIR if args.state_dir is None else args.state_dir
    if args.action == "up":
        return devup.up(
            state_dir, labels=args.label, gpus=args.gpus, no_operator=args.no_operator,
            operator_cmd=args.operator_cmd, seed_models=not args.no_seed_models,
            timeout=devup.READY_TIMEOUT if args.timeout is None else args.timeout,
            images=args.images,
        )  # fmt: skip
    if args.action == "down":
        return devup.down(state_dir)
    return devup.status(state_dir)
