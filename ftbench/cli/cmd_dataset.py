"""`ftbench dataset list|generate`: pre-generate the artificial datasets, as seed 002 does.

The generators live with the trainer (it generates a missing file at run time); this command
hands its arguments to them unchanged, so there is one CLI. `-o DIR/<datasetId>.jsonl|parquet`
writes seed 002's file, which runs (ftbench's and ado's) then use as is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

from ftbench.cli.main import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dataset",
        help="list or generate the artificial datasets (generate ID -o DIR|FILE [--entries N])",
        description="Runs the trainer's dataset generators; `ftbench dataset generate --help` lists the options.",
    )
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="list|generate ...")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("ftbench_trainer") is None:
        raise UsageError("the dataset generators need the trainer extra (pip install 'ftbench[trainer]')")
    if not args.args:
        raise UsageError("say `list` or `generate DATASET_ID -o PATH`")
    from ftbench.catalog import load_catalog

    known = load_catalog().datasets
    if args.args[0] == "list":
        print(json.dumps({name: entry.generator().params() for name, entry in sorted(known.items())}, indent=2))
        return 0
    if args.args[0] != "generate":
        raise UsageError(f"{args.args[0]!r}: say `list` or `generate DATASET_ID -o PATH`")
    generate = argparse.ArgumentParser(add_help=False)
    generate.add_argument("dataset", nargs="?")
    for option in ("-o", "--entries", "--min-tokens", "--seed"):
        generate.add_argument(option)
    named, _ = generate.parse_known_args(args.args[1:])
    extra: list[str] = []
    if named.dataset is not None:
        if named.dataset not in known:
            raise UsageError(f"unknown dataset {named.dataset!r}: one of {', '.join(sorted(known))}")
        extra = ["--generator", known[named.dataset].generator().model_dump_json()]
    # Its own process, as `ftbench run` starts the trainer: ftbench never imports the trainer package. The
    # catalog's generator parameters go with it (the trainer reads no catalog).
    command = [sys.executable, "-m", "ftbench_trainer.datasets", *args.args, *extra]
    return subprocess.run(command, check=False).returncode
