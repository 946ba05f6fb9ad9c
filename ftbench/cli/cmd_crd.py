"""`ftbench crd`: print (or write) the CRD generated from the API models."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.api.crd import CRD_FILENAME, crd_yaml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crd", help="print the FineTuneExperiment CRD (generated from the API models)")
    p.add_argument("-o", "--output-dir", metavar="DIR", help=f"write DIR/{CRD_FILENAME} instead of printing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = crd_yaml()
    if args.output_dir:
        path = Path(args.output_dir) / CRD_FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    else:
        print(text, end="")
    return 0
