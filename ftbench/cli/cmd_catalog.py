"""`ftbench catalog models|experiments|datasets|engines`: the catalogs as tables."""

from __future__ import annotations

import argparse

from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import catalog_from_args
from ftbench.cli.table import format_table
from ftbench.engines.releases import load_releases


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list the models, experiments or datasets ftbench knows")
    p.add_argument("what", choices=("models", "experiments", "datasets", "engines"))
    p.add_argument("--model-map", metavar="FILE", help="extra/overriding models in seed 002's model_map format")
    p.set_defaults(func=run)


def models_table(catalog: Catalog) -> str:
    rows = [
        (
            m.name,
            m.weights.vanilla or "-",
            m.weights.gptq or "-",
            ",".join(m.target_modules or ()) or "-",
            m.layer_class or "-",
            m.num_local_experts or "-",
        )
        for m in sorted(catalog.models.values(), key=lambda m: m.name)
    ]
    return format_table(("MODEL", "WEIGHTS", "GPTQ WEIGHTS", "LORA TARGETS", "FSDP LAYER", "EXPERTS"), rows)


def experiments_table(catalog: Catalog) -> str:
    rows = [
        (
            e.name.value,
            e.method,
            e.weights,
            "/".join(d.value for d in e.torch_dtypes),
            "yes" if e.multi_node else "no",
            e.trials,
            e.description,
        )
        for e in catalog.experiments.values()
    ]
    return format_table(("EXPERIMENT", "METHOD", "WEIGHTS", "DTYPES", "MULTI-NODE", "TRIALS", "DESCRIPTION"), rows)


def datasets_table(catalog: Catalog) -> str:
    rows = [(d.name, d.kind, d.entries, d.description) for d in sorted(catalog.datasets.values(), key=lambda d: d.name)]
    return format_table(("DATASET", "KIND", "ENTRIES", "DESCRIPTION"), rows)


STACK = ("transformers", "trl", "peft", "accelerate", "datasets", "numpy")


def engines_table(_: Catalog) -> str:
    """Every offered fms-hf-tuning release: its stack (from its lock), API class, torch, what it cannot do."""
    releases = load_releases()
    rows = []
    for r in releases.releases:
        stack = r.stack() if r.installable else {}
        state = "default" if r.version == releases.default else ("offered" if r.installable else "not installable")
        limits = "; ".join(f"no {m}" for m in r.defects) or ("-" if r.installable else r.reason.split(" (")[0])
        runs = ",".join(releases.matrix().get(r.version, ())) or "-"
        rows.append((r.version, state, r.api, *(stack.get(p, "-") for p in STACK), r.seed_torch, runs, limits))
    head = ("RELEASE", "STATE", "API", *(p.upper() for p in STACK), "SEED TORCH", "CI RUNS", "LIMITS")
    note = (
        f"\nEnvironments here run torch {releases.cpu_torch} (CPU) instead of the seed's torch; "
        "CI RUNS: what the release matrix trains in every CI run (docs/engines.md)."
    )
    return format_table(head, rows) + note


def run(args: argparse.Namespace) -> int:
    catalog = catalog_from_args(args)
    tables = {"models": models_table, "experiments": experiments_table, "datasets": datasets_table}
    table = {**tables, "engines": engines_table}[args.what]
    print(table(catalog))
    return 0
