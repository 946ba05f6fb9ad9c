"""`python -m ftbench_operator [kopf run options]`: the operator with its defaults.

Cluster-wide (`-A`) unless `--namespace` is given; `--standalone` (one replica, no peering
objects); liveness/readiness at `http://0.0.0.0:8080/healthz` unless `--liveness` is given.
Any other `kopf run` option passes through.
"""

from __future__ import annotations

import sys

import kopf.cli

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"


def argv(args: list[str]) -> list[str]:
    """The `kopf run` command line for `args` (pure, for tests)."""
    out = ["run", "--standalone", "-m", "ftbench_operator.app"]
    if not any(a in ("-A", "--all-namespaces") or a.startswith(("--namespace", "-n")) for a in args):
        out.append("--all-namespaces")
    if not any(a.startswith("--liveness") for a in args):
        out.append(f"--liveness={DEFAULT_LIVENESS}")
    return out + args


def main() -> None:
    kopf.cli.main(args=argv(sys.argv[1:]), prog_name="ftbench-operator")


if __name__ == "__main__":
    main()
