"""`ftbench results`: past local runs as a table, exported as CSV/JSON, or two of them compared."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.cli.main import UsageError
from ftbench.cli.source import add_cluster_options, cluster_errors, reads_cluster
from ftbench.cli.table import format_table
from ftbench.local.home import results_db
from ftbench.local.store import ResultsStore, RunRecord, export_runs


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
    add_cluster_options(
        p, "export the FineTuneExperiments of a cluster (KUBECONFIG or in-cluster) instead of local runs"
    )
    p.set_defaults(func=run)
    actions = p.add_subparsers(dest="action", metavar="ACTION")  # optional: plain `ftbench results` lists
    c = actions.add_parser(
        "compare",
        help="two runs side by side: the spec fields that differ and each headline metric with B/A-1",
        description="A and B are run ids from `ftbench results` (a unique id prefix, or a run name that "
        "only one run has, also works). A run with several results (stability trials) counts as their mean.",
    )
    c.add_argument("a", metavar="A", help="the baseline run")
    c.add_argument("b", metavar="B", help="the run compared with it")
    c.set_defaults(func=compare_runs)


def compare_runs(args: argparse.Namespace) -> int:
    from ftbench.report.compare import RunLookupError, compare, find_run

    runs = ResultsStore(results_db()).runs()
    try:
        a, b = find_run(runs, args.a), find_run(runs, args.b)
    except RunLookupError as err:
        raise UsageError(str(err)) from err
    print(format_table(("", "A", "B", "B/A-1", "NOISE"), compare(a, b).rows))
    return 0


def _runs(args: argparse.Namespace) -> list[RunRecord]:
    """The local store's runs, or with --from-cluster what the cluster's experiments measured."""
    if not reads_cluster(args):
        return ResultsStore(results_db()).runs()
    from ftbench.report.cluster import experiment_records

    with cluster_errors():
        return experiment_records(args.namespace)


def run(args: argparse.Namespace) -> int:
    runs = _runs(args)
    if args.export:
        text = export_runs(runs, args.export, args.names)
        if args.output_file:
            Path(args.output_file).write_text(text)
            print(f"wrote {len(runs)} run(s) to {args.output_file}")
        else:
            print(text, end="" if text.endswith("\n") else "\n")
        return 0
    rows = [
        (r.id, r.name, r.experiment.removeprefix("finetune_"), r.model, r.engine, r.number_gpus, r.batch_size,
         r.status, "" if r.is_valid is None else r.is_valid,
         "" if r.train_tokens_per_second is None else f"{r.train_tokens_per_second:,.1f}",
         "" if r.prediction_error_percent is None else f"{r.prediction_error_percent:+.1f}%")
        for r in runs
    ]  # fmt: skip
    if not rows:
        print("no runs yet: try `ftbench run examples/quickstart.yaml`")
        return 0
    print(format_table(("RUN", "NAME", "EXPERIMENT", "MODEL", "ENGINE", "GPUS", "BATCH", "STATUS", "VALID",
                        "TOKENS/S", "MEM PRED ERR"), rows))  # fmt: skip
    return 0
