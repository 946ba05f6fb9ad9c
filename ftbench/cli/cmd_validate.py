"""`ftbench validate FILE...`: the same rules the operator applies, before anything is applied."""

from __future__ import annotations

import argparse
from typing import Any

from ftbench.api.effective import describe_batch
from ftbench.api.fabric import roce_warning
from ftbench.api.kinds import SWEEP_KIND
from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.rules.data import describe_rows
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import Issue, load_profile, validate_document
from ftbench.catalog import Catalog, load_catalog, load_model_map
from ftbench.cli.documents import read_documents
from ftbench.cli.main import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check FineTuneExperiment and FineTuneSweep files; exit 1 if any is invalid")
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files (multi-document allowed, - for stdin)")
    add_model_map(p)
    p.add_argument(
        "--profile",
        metavar="FILE",
        help="the cluster profile to check against (RoCE, allow-lists, model map; default: a plain GPU cluster "
        "without RoCE)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems and warnings")
    p.set_defaults(func=run)


def add_model_map(p: argparse.ArgumentParser) -> None:
    """`--model-map`, read by `catalog_from_args`: every command that resolves models takes it."""
    p.add_argument("--model-map", metavar="FILE", help="extra/overriding models in seed 002's model_map format")


def catalog_from_args(args: argparse.Namespace, base: Catalog | None = None) -> Catalog:
    """`base` (default: the shipped catalog) with --model-map on top: the command line wins."""
    catalog = base or load_catalog()
    if getattr(args, "model_map", None):
        try:
            catalog = catalog.with_model_map(load_model_map(args.model_map))
        except (OSError, ValueError) as err:
            raise UsageError(str(err)) from err
    return catalog


def profile_from_arg(path: str | None) -> ClusterProfile:
    try:
        return load_profile(path)
    except OSError as err:
        raise UsageError(f"cluster profile {path}: {err}") from err
    except ValueError as err:  # one line: every bad field, its value and what it must be
        raise UsageError(str(err)) from err


def run(args: argparse.Namespace) -> int:
    profile = profile_from_arg(args.profile)
    catalog = catalog_from_args(args, catalog_for(profile))
    failed = 0
    try:
        documents = list(read_documents(args.files))
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from err
    for doc in documents:
        if isinstance(doc.body, dict) and doc.body.get("kind") == SWEEP_KIND:
            failed += _validate_sweep(doc.source, doc.body, catalog, quiet=args.quiet)
            continue
        report = validate_document(doc.body, catalog, profile=profile)
        metadata = doc.body.get("metadata") if isinstance(doc.body, dict) else None
        name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
        if report.ok and report.spec is not None:
            if not args.quiet:
                print(f"{doc.source}: {name}: valid")
                print(f"  batch: {describe_batch(report.spec)}")
                print(f"  data: {describe_rows(report.spec, catalog)}")
            if warning := roce_warning(report.spec, profile):
                print(f"  warning: {warning}" if not args.quiet else f"{doc.source}: {name}: warning: {warning}")
            continue
        failed += 1
        print(f"{doc.source}: {name}: invalid")
        for issue in report.issues:
            print(f"  - {issue}")
    if not documents:
        raise UsageError("no YAML documents found")
    return 1 if failed else 0


def _validate_sweep(source: str, body: dict, catalog: Catalog, *, quiet: bool) -> int:
    """1 when the sweep cannot run at all; its invalid points are listed but are measurements
    (isValid false with the reason), as the operator records them."""
    from ftbench.sweep.cost import sweep_cost  # a sweep's alone: `ftbench predict` of one spec never needs them
    from ftbench.sweep.points import expand, parse_sweep_document

    parsed = parse_sweep_document(body)
    issues: tuple[Issue, ...] = parsed.issues
    expansion = expand(parsed.spec, catalog) if parsed.spec is not None and not issues else None
    if expansion is not None:
        issues = expansion.issues
    if issues or expansion is None:
        print(f"{source}: {parsed.name or '?'}: invalid")
        for issue in issues:
            print(f"  - {issue}")
        return 1
    bad = [p for p in expansion.points if not p.valid]
    if not quiet or bad:
        print(f"{source}: {parsed.name}: valid sweep, {len(expansion.points)} points, {len(bad)} invalid")
    if not quiet:
        print(f"  cost: {sweep_cost(expansion.points, catalog).sentence()}")
    for point in bad:
        print(f"  - point {point.index} ({point.describe()}): " + "; ".join(str(i) for i in point.issues))
    return 0


def spec_from_body(args: argparse.Namespace, body: Any, base: Catalog) -> tuple[FineTuneExperimentSpec, str, Catalog]:
    """A FineTuneExperiment document validated (`ftbench run`, `ftbench predict`): its spec, name and catalog."""
    catalog = catalog_from_args(args, base)
    report = validate_document(body, catalog)
    if not report.ok or report.spec is None:
        lines = "\n".join(f"  - {issue}" for issue in report.issues)
        raise UsageError(f"{args.file} is invalid:\n{lines}")
    return report.spec, body["metadata"]["name"], catalog
