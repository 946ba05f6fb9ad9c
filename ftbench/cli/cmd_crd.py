"""`ftbench crd`: print (or write) the CRDs generated from the API models."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.api.crd import all_crds, crd_yaml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crd", help="print the FineTuneExperiment and FineTuneSweep CRDs (generated from the API models)"
    )
    p.add_argument("-o", "--output-dir", metavar="DIR", help="write one file per CRD into DIR instead of printing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    documents = all_crds()
    if not args.output_dir:
        print("---\n".join(crd_yaml(document=doc) for doc in documents.values()), end="")
        return 0
    for filename, document in documents.items():
        path = Path(args.output_dir) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(crd_yaml(document=document))
        print(f"wrote {path}")
    return 0
