"""`ftbench results`: past local runs as a table, exported as CSV/JSON, or two of them compared."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.catalog import load_catalog
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
    p.add_argument(
        "--import",
        dest="import_",
        nargs=2,
        metavar=("ado", "FILE"),
        help="bring ado's runs (a CSV of ado's SFTTrainer results, e.g. IBM's LLMFineTuningBench) into the local "
        "store beside ftbench's; listed after them (docs/measurements.md, \"ado's rows\")",
    )
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


def import_ado(args: argparse.Namespace) -> int:
    from ftbench.local.ado_rows import read_ado_csv

    kind, file = args.import_
    if kind != "ado":
        raise UsageError(f"--import {kind}: the only format is ado (--import ado FILE)")
    try:
        rows = read_ado_csv(Path(file).read_text())
    except (OSError, UnicodeDecodeError, ValueError, KeyError) as err:
        raise UsageError(f"cannot read {file} as ado's CSV: {err}") from err
    kept = ResultsStore(results_db()).import_ado(Path(file).name, rows)
    skipped = sorted({r.reason for r in rows if r.reason})
    print(f"imported {kept} of {len(rows)} ado row(s) from {file}")
    for reason in skipped:
        print(f"  not imported: {reason}")
    return 0


def ado_table(store: ResultsStore) -> str | None:
    rows = [
        (r.id, r.spec["experiment"].removeprefix("finetune_"), r.spec["model"], r.spec["fmsHfTuningVersion"],
         r.spec["numberGpus"], r.spec["batchSize"], r.spec["modelMaxLength"], "ran" if r.is_valid else "failed",
         _number(r.measured.get("dataset_tokens_per_second")), _number(r.measured.get("gpu_memory_utilization_peak")))
        for r in store.ado_runs()
    ]  # fmt: skip
    if not rows:
        return None
    return format_table(("ADO RUN", "EXPERIMENT", "MODEL", "FMS", "GPUS", "BATCH", "SEQ", "OUTCOME",
                         "DATASET TOKENS/S", "GPU MEM PEAK %"), rows)  # fmt: skip


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def run(args: argparse.Namespace) -> int:
    if args.import_:
        return import_ado(args)
    runs = _runs(args)
    if args.export:
        text = export_runs(runs, args.export, args.names)
        if args.output_file:
            Path(args.output_file).write_text(text)
            print(f"wrote {len(runs)} run(s) to {args.output_file}")
        else:
            print(text, end="" if text.endswith("\n") else "\n")
        return 0
    catalog = load_catalog()
    rows = [
        (r.id, r.name, r.experiment.removeprefix("finetune_"), r.model, r.engine, r.number_gpus, r.batch_size,
         r.status, "" if r.is_valid is None else r.is_valid,
         "" if r.train_tokens_per_second is None else f"{r.train_tokens_per_second:,.1f}",
         "" if r.prediction_error_percent is None else f"{r.prediction_error_percent:+.1f}%",
         "" if (e := r.throughput_error_percent(catalog)) is None else f"{e:+.0f}%", r.rows_trained)
        for r in runs
    ]  # fmt: skip
    ado = None if reads_cluster(args) else ado_table(ResultsStore(results_db()))
    if not rows and not ado:
        print("no runs yet: try `ftbench run examples/quickstart.yaml`")
        return 0
    if rows:
        print(format_table(("RUN", "NAME", "EXPERIMENT", "MODEL", "ENGINE", "GPUS", "BATCH", "STATUS", "VALID",
                            "TOKENS/S", "MEM PRED ERR", "TOK/S PRED ERR", "ROWS TRAINED"), rows))  # fmt: skip
    if ado:
        print(("\n" if rows else "") + "ado's runs (ftbench results --import ado FILE):\n" + ado)
    return 0
