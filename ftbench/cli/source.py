"""Where `ftbench results` and `ftbench report` read runs: this machine's results store, or a cluster.

Both commands take `--from-cluster` with `-n/--namespace`, refuse a namespace without a cluster and
turn a cluster that cannot be read into a one-line usage error; the options and that rule are
written here once so the two commands cannot drift apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from ftbench.cli.main import UsageError


def add_cluster_options(p: argparse.ArgumentParser, from_cluster_help: str) -> None:
    """`--from-cluster` (`from_cluster_help` says what the command reads there) and its `-n/--namespace`."""
    p.add_argument("--from-cluster", action="store_true", help=from_cluster_help)
    p.add_argument("-n", "--namespace", help="with --from-cluster: the namespace (default: the context's)")


def reads_cluster(args: argparse.Namespace) -> bool:
    """Whether the command reads the cluster (--from-cluster); --namespace alone is a usage error."""
    if args.namespace and not args.from_cluster:
        raise UsageError("--namespace reads a cluster: add --from-cluster")
    return bool(args.from_cluster)


@contextmanager
def cluster_errors() -> Iterator[None]:
    """Around a cluster read: an API error or a missing cluster becomes a usage error naming the cause."""
    from ftbench.kubeapi.errors import KubeError
    from ftbench.report.cluster import NoCluster

    try:
        yield
    except (KubeError, NoCluster) as err:
        raise UsageError(f"cannot read the cluster: {err}") from err
