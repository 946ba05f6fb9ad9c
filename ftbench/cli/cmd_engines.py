"""`ftbench engines list|build|prune`: the local fms-hf-tuning environments (one per release).

`ftbench run` builds the one an experiment needs on first use; `build` makes them ahead of time
(all installable releases, or the ones named), `prune` removes those no lock uses any more.
"""

from __future__ import annotations

import argparse
import sys

from ftbench.cli.main import UsageError
from ftbench.cli.table import format_table
from ftbench.engines.envs import ensure_env, list_envs, prune
from ftbench.engines.releases import load_releases


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engines", help="list, build or remove the local fms-hf-tuning environments")
    p.add_argument("action", choices=("list", "build", "prune"))
    p.add_argument("versions", nargs="*", metavar="VERSION", help="build: these releases (default: all installable)")
    p.add_argument("--all", action="store_true", help="prune: remove every environment, current ones too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = [(e.release, "ready" if e.ready else "incomplete", "yes" if e.current else "stale", e.path)
                for e in list_envs()]  # fmt: skip
        print(format_table(("RELEASE", "STATE", "CURRENT", "PATH"), rows) if rows else "no environments yet")
        return 0
    if args.action == "prune":
        for path in prune(everything=args.all):
            print(f"removed {path}")
        return 0
    releases = load_releases()
    try:
        versions = [releases.get(v).version for v in args.versions] or [r.version for r in releases.installable]
        for version in versions:
            print(f"fms-hf-tuning {version}: {ensure_env(version, log=lambda m: print(m, file=sys.stderr))}")
    except (KeyError, RuntimeError) as err:
        raise UsageError(str(err)) from err
    return 0
