"""`ftbench catalog models|experiments|datasets`: the catalogs as tables."""

from __future__ import annotations

import argparse

from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import catalog_from_args
from ftbench.cli.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list the models, experiments or datasets ftbench knows")
    p.add_argument("what", choices=("models", "experiments", "datasets"))
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


def run(args: argparse.Namespace) -> int:
    catalog = catalog_from_args(args)
    table = {"models": models_table, "experiments": experiments_table, "datasets": datasets_table}[args.what]
    print(table(catalog))
    return 0
