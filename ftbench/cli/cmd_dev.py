"""`ftbench dev` where the test rig is not installed: what to install, and nothing of the rig imported.

The real command comes with the test rig (devcluster/, its own distribution), which registers it as a
plugin of this command line (`ftbench_devcluster.cli`, entry point group `ftbench.commands`). Without
the rig, this stub takes the same place and says how to get it; `dev up` first names the operator extra
it would need as well, as the command itself does.
"""

from __future__ import annotations

import argparse

from ftbench.extras import MissingExtra, require

RIG_HINT = (
    "`ftbench dev` needs the test rig, which the ftbench package does not ship: from a source checkout, "
    "pip install -e ./devcluster (hack/setup-envs.sh installs it into .venv)"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dev", help="a local dev cluster (needs the test rig: pip install -e ./devcluster)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if "up" in args.rest:
        require("operator", "starting the kubelet and operator", ("kubernetes", "kopf"))
    raise MissingExtra(RIG_HINT)
