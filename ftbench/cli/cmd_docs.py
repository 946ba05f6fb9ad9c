"""`ftbench docs -o docs`: write the reference pages generated from the models and catalogs.

`--check` writes nothing and exits 1 when a committed page differs from what the code generates,
so CI (and tests/ship/test_docs.py) catch a field added without regenerating its documentation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.generated.docs import generate_all
from ftbench.host.files import sync_generated


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("docs", help="write the generated reference docs (CRD, experiments, metrics, cluster profile)")
    p.add_argument("-o", "--output-dir", metavar="DIR", default="docs", help="docs directory (default: docs)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any generated page is stale")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.output_dir)
    files = {root / relative: text for relative, text in generate_all().items()}
    return sync_generated(files, check=args.check, regenerate=f"ftbench docs -o {root}")
