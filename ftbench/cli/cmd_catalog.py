"""`ftbench catalog models|experiments|datasets|engines`: the catalogs as tables."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable

import yaml

from ftbench.catalog import Catalog
from ftbench.cli.cmd_validate import add_model_map, catalog_from_args
from ftbench.cli.table import cut, format_table
from ftbench.contracts.wire import WireModel
from ftbench.engines.releases import load_releases


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "catalog",
        help="list the models, experiments, datasets or fms-hf-tuning releases ftbench knows",
        description="The names a FineTuneExperiment may use: spec.model, spec.experiment, spec.datasetId and "
        "spec.fmsHfTuningVersion (engine fms-hf-tuning; engine trl uses this environment's trl).",
    )
    p.add_argument("what", choices=("models", "experiments", "datasets", "engines"))
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="table: the columns that fit a terminal, long cells cut (default); wide: every column in full; "
        "json/yaml: the catalog entries",
    )
    add_model_map(p)
    p.set_defaults(func=run)


# A default table's cells are cut to this; -o wide shows them whole.
CELL_LIMIT = 40


def models_table(catalog: Catalog, wide: bool = False) -> str:
    """Default: name, GPTQ weights or not, LoRA targets, FSDP layer, experts; wide adds the weights' paths."""
    models = sorted(catalog.models.values(), key=lambda m: m.name)
    if wide:
        full = [
            (m.name, m.weights.vanilla or "-", m.weights.gptq or "-", ",".join(m.target_modules or ()) or "-",
             m.layer_class or "-", m.num_local_experts or "-")
            for m in models
        ]  # fmt: skip
        return format_table(("MODEL", "WEIGHTS", "GPTQ WEIGHTS", "LORA TARGETS", "FSDP LAYER", "EXPERTS"), full)
    rows = [
        (m.name, "yes" if m.weights.gptq else "no", cut(",".join(m.target_modules or ()) or "-", CELL_LIMIT),
         cut(m.layer_class or "-", CELL_LIMIT), m.num_local_experts or "-")
        for m in models
    ]  # fmt: skip
    return format_table(("MODEL", "GPTQ", "LORA TARGETS", "FSDP LAYER", "EXPERTS"), rows)


def experiments_table(catalog: Catalog, wide: bool = False) -> str:
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
    head = ("EXPERIMENT", "METHOD", "WEIGHTS", "DTYPES", "MULTI-NODE", "TRIALS", "DESCRIPTION")
    return format_table(head, rows, max_cell=None if wide else 48)


def datasets_table(catalog: Catalog, wide: bool = False) -> str:
    rows = [(d.name, d.kind, d.entries, d.description) for d in sorted(catalog.datasets.values(), key=lambda d: d.name)]
    return format_table(("DATASET", "KIND", "ENTRIES", "DESCRIPTION"), rows, max_cell=None if wide else 60)


STACK = ("transformers", "trl", "peft", "accelerate", "datasets", "numpy")


def engines_table(_: Catalog, wide: bool = False) -> str:
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
    return format_table(head, rows, max_cell=None if wide else CELL_LIMIT) + note


def entries(catalog: Catalog, what: str) -> list[dict]:
    """The catalog's entries of one kind as their wire form (camelCase), for -o json/yaml."""
    if what == "engines":
        return [r.model_dump(mode="json", by_alias=True) for r in load_releases().releases]
    kinds: dict[str, Iterable[WireModel]] = {
        "models": catalog.models.values(),
        "experiments": catalog.experiments.values(),
        "datasets": catalog.datasets.values(),
    }
    return [entry.model_dump(mode="json", by_alias=True) for entry in kinds[what]]


def run(args: argparse.Namespace) -> int:
    catalog = catalog_from_args(args)
    if args.output in ("json", "yaml"):
        found = entries(catalog, args.what)
        print(
            json.dumps(found, indent=2) if args.output == "json" else yaml.safe_dump(found, sort_keys=False), end="\n"
        )
        return 0
    tables = {"models": models_table, "experiments": experiments_table, "datasets": datasets_table}
    table = {**tables, "engines": engines_table}[args.what]
    print(table(catalog, args.output == "wide"))
    return 0
