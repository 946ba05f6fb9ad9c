"""`ftbench report`: a sweep's (or every local run's) table and plots as report.md and report.html."""

from __future__ import annotations

import argparse
from pathlib import Path

from ftbench.catalog import load_catalog
from ftbench.cli.main import UsageError
from ftbench.cli.source import add_cluster_options, cluster_errors, reads_cluster
from ftbench.extras import require
from ftbench.local.home import results_db
from ftbench.local.store import ResultsStore
from ftbench.report.plots import FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write report.md and a self-contained report.html with plots of sweeps and runs",
        description="Tables and plots (throughput, peak GPU memory with the OOM frontier, MFU, step-time "
        "spread across repeats) of the local results store, one sweep of it, or a cluster's sweeps.",
    )
    p.add_argument("--sweep", metavar="NAME", help="only this sweep (default: every sweep and run)")
    add_cluster_options(p, "read FineTuneSweeps and FineTuneExperiments from the cluster (KUBECONFIG or in-cluster)")
    p.add_argument("-o", "--output-dir", metavar="DIR", default="report", help="where to write (default: report)")
    p.add_argument("--format", choices=FORMATS, default="png", help="plot format (default: png)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require("report", "drawing the plots")  # checked before anything is read
    from ftbench.report.data import NotFound, ReportData, from_store
    from ftbench.report.render import write_report

    catalog = load_catalog()
    data: ReportData
    if reads_cluster(args):
        from ftbench.report.cluster import from_cluster

        with cluster_errors():
            data = from_cluster(catalog, args.namespace)
    else:
        data = from_store(ResultsStore(results_db()), catalog)
    try:
        data = data.only(args.sweep) if args.sweep else data
    except NotFound as err:
        raise UsageError(str(err)) from err
    paths = write_report(data, Path(args.output_dir), args.format)
    print(f"wrote {paths[0]} and {paths[1]} ({len(paths) - 2} plots)")
    return 0
