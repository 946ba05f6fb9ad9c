"""`ftbench results`: past local runs as a table, or exported as CSV/JSON."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.cli.table import format_table
from ftbench.local.home import ftbench_home
from ftbench.local.store import ResultsStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="list the results of past local runs (ftbench run)")
    p.add_argument("--export", choices=("csv", "json"), help="write all runs in this format instead of a table")
    p.add_argument(
        "--names",
        choices=("ftbench", "ado"),
        default="ftbench",
        help="ado: one row per trial with ado's property names (train_tokens_per_second, is_valid, ...)",
    )
    p.add_argument("-o", "--output-file", metavar="FILE", help="write the export to FILE instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = ResultsStore(ftbench_home() / "results.db")
    if args.export:
        text = store.export(args.export, args.names)
        if args.output_file:
            Path(args.output_file).write_text(text)
            print(f"wrote {len(store.runs())} run(s) to {args.output_file}")
        else:
            print(text, end="" if text.endswith("\n") else "\n")
        return 0
    rows = [
        (r.id, r.name, r.experiment.removeprefix("finetune_"), r.model, r.engine, r.number_gpus, r.batch_size,
         r.status, "" if r.is_valid is None else r.is_valid,
         "" if r.train_tokens_per_second is None else f"{r.train_tokens_per_second:,.1f}")
        for r in store.runs()
    ]  # fmt: skip
    if not rows:
        print("no runs yet: try `ftbench run examples/quickstart.yaml`")
        return 0
    print(format_table(("RUN", "NAME", "EXPERIMENT", "MODEL", "ENGINE", "GPUS", "BATCH", "STATUS", "VALID",
                        "TOKENS/S"), rows))  # fmt: skip
    return 0
