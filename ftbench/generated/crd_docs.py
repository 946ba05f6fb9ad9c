"""The FineTuneExperiment and FineTuneSweep reference pages, from the generated CRDs themselves
(exactly what the API server checks and `kubectl explain` prints) and the cross-field rules."""

from __future__ import annotations

from typing import Any

from ftbench.api.crd import crd, sweep_crd
from ftbench.api.rules import all_rules
from ftbench.catalog import Catalog, load_catalog
from ftbench.contracts.ado_names import ADO_PARAMETERS, ADO_PROPERTIES, FTBENCH_EXTRAS, RUN_COLUMNS
from ftbench.generated.markdown import HEADER, cell, code, schema_sections, table


def _title(definition: dict[str, Any]) -> str:
    """The page's title and what the kind is: group/version, kind, scope, short names, categories."""
    version, names = definition["spec"]["versions"][0], definition["spec"]["names"]
    root = version["schema"]["openAPIV3Schema"]
    return (
        f"# {names['kind']} reference\n\n"
        f"`apiVersion: {definition['spec']['group']}/{version['name']}`, `kind: {names['kind']}`, "
        f"namespaced; short name {', '.join(code(s) for s in names['shortNames'])}, category "
        f"{', '.join(code(c) for c in names['categories'])}. {cell(root['description'])}\n\n"
    )


def _printer_columns(version: dict[str, Any], short: str) -> str:
    columns = [
        (cell(c["name"]), code(c["jsonPath"]), "wide" if c.get("priority") else "default")
        for c in version["additionalPrinterColumns"]
    ]
    return (
        "## Printer columns\n\n"
        f"`kubectl get {short}` shows the default columns, `kubectl get {short} -o wide` all of them.\n\n"
        + table(("Column", "JSONPath", "Shown"), columns)
    )


def crd_reference(catalog: Catalog | None = None) -> str:
    """Every field of FineTuneExperiment spec and status, and the cross-field rules."""
    catalog = catalog or load_catalog()
    definition = crd(catalog)
    version = definition["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    spec, status = root["properties"]["spec"], root["properties"]["status"]
    rules = [
        (
            code(rule.id),
            code(f"spec.{rule.field}"),
            cell(rule.summary),
            code(rule.cel) if rule.cel else "checked by `ftbench validate` and the operator (needs the catalog)",
        )
        for rule in all_rules(catalog)
    ]
    parts = [
        HEADER.format(source="ftbench/api (spec.py, status.py, rules/) via ftbench/api/crd.py"),
        _title(definition),
        "Field names are seed 001's parameter names in camelCase (`batch_size` -> `batchSize`, "
        "`model_name` -> `model`). `kubectl explain fte.spec.<field>` prints the same descriptions. "
        "The spec is immutable after creation: it is the record of what was measured.\n\n",
        "## Spec\n\n",
        *(s + "\n" for s in schema_sections(spec, "spec")),
        "## Validation rules\n\n",
        "Beyond the per-field types and ranges above. Rules with a CEL expression are also enforced by "
        "the API server (Kubernetes >= 1.28) when the experiment is created; the rest, and all of them "
        "on older servers, by `ftbench validate` and the operator (phase `Invalid`).\n\n",
        table(("Rule", "Field", "Requirement", "CEL"), rules),
        "\n## Status\n\n",
        "Written by the operator; `status.progress` by the trainer's rank 0.\n\n",
        *(s + "\n" for s in schema_sections(status, "status")),
        _printer_columns(version, "fte"),
        "\n## ado's names\n\n",
        "Analyses written against ado's SFTTrainer actuator read ftbench runs with "
        "`ftbench results --export csv|json --names ado` (one row per trial). The mapping, from "
        "`ftbench/contracts/ado_names.py`; the values keep ftbench's definitions, and "
        "[ftbench and ado, side by side](../measurements.md#ftbench-and-ado-side-by-side) says what "
        "each difference does to a number. The experiment is written with ado's registered id "
        "(`finetune_gptq-lora_benchmark-v1.0.0` for GPTQ-LoRA). Columns whose name starts with "
        "`ftbench_` come last and are ftbench's, not ado's: `ftbench_node_memory_used_percent` is the "
        "node's memory in use, the quantity ado's `cpu_memory_utilization` measures (that column "
        "carries ftbench's figure, the training processes' memory, seed note 2); the `ftbench_steady_state_*`, "
        "`ftbench_throughput_ci95_relative`, `ftbench_measured_steps` and `ftbench_noise_flags` (`;`-joined) "
        "columns say how sure the throughput is. The run columns follow: "
        "the run id (a FineTuneExperiment's uid with `--from-cluster`), its status (Succeeded, Invalid, "
        "Failed, Interrupted, ...: rows of runs that measured nothing have empty properties), the engine "
        "and the version of it that ran; `fms_hf_tuning_version` is empty for trl runs.\n\n",
        table(
            ("Export column", "ftbench field"),
            [(code(a), code(f"spec.{f}")) for a, f in ADO_PARAMETERS.items()]
            + [(code("is_valid"), code("status.isValid"))]
            + [
                (code(a), code(f"status.results.{_camel_name(f)}"))
                for a, f in (ADO_PROPERTIES | FTBENCH_EXTRAS).items()
            ]
            + [
                (code(a), code(f))
                for a, f in zip(
                    RUN_COLUMNS,
                    ("metadata.uid", "status.phase", "spec.engine", "status.environment.engineVersion"),
                    strict=True,
                )
            ],
        ),
    ]
    return "".join(parts)


def sweep_reference(catalog: Catalog | None = None) -> str:
    """Every field of FineTuneSweep spec and status, from the generated CRD."""
    definition = sweep_crd(catalog or load_catalog())
    version = definition["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    spec = {**root["properties"]["spec"]}
    spec["properties"] = {k: v for k, v in spec["properties"].items() if k != "template"}
    parts = [
        HEADER.format(source="ftbench/api/sweep.py via ftbench/api/crd.py"),
        _title(definition),
        "How points are ordered, pruned, reused and counted: [sweeps](../sweeps.md). "
        "`kubectl explain fts.spec` prints the same descriptions.\n\n",
        "## Spec\n\n",
        "`spec.template` is a FineTuneExperiment spec: every field of [the experiment's spec](crd.md#spec), "
        "none required (the matrix may set them) and without defaults; each point is validated whole, as "
        "the experiment it becomes.\n\n",
        *(s + "\n" for s in schema_sections(spec, "spec")),
        "## Status\n\n",
        "Written by the operator (and computed the same way by `ftbench sweep`).\n\n",
        *(s + "\n" for s in schema_sections(root["properties"]["status"], "status")),
        _printer_columns(version, "fts"),
    ]
    return "".join(parts)


def _camel_name(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)
