"""Generate the FineTuneExperiment CRD from the pydantic models (the models are the one source).

Pydantic emits JSON Schema 2020-12; Kubernetes wants a structural OpenAPI v3 schema. The
conversion inlines `$ref`s, turns `Optional[X]` into `X` (never `nullable`: the API server publishes a
nullable field's OpenAPI v2 without its type, so `kubectl explain` printed `<>`; a null in an object
is pruned by the server like an absent field), drops titles and
`additionalProperties: false`, and rewrites exclusive bounds. Descriptions are kept, so
`kubectl explain fte.spec.<field>` prints the field docs. The cross-field rules are added as CEL.
`crds/` holds the output; tests/unit/test_crd.py fails when it is stale.
"""

from __future__ import annotations

import copy
import json
from typing import Any, NamedTuple

import yaml

from ftbench.api.kinds import (
    CATEGORIES,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    SWEEP_KIND,
    SWEEP_PLURAL,
    SWEEP_SHORT_NAMES,
    SWEEP_SINGULAR,
    VERSION,
)
from ftbench.api.rules import all_rules
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import FineTuneExperimentStatus
from ftbench.api.sweep import FineTuneSweepSpec, FineTuneSweepStatus, spec_fields
from ftbench.catalog import Catalog, load_catalog

CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"
SWEEP_CRD_FILENAME = f"{GROUP}_{SWEEP_PLURAL}.yaml"

# Columns describe what ran and what it measured: the spec the operator accepted (status.acceptedSpec,
# defaults filled in), never .spec, which an old API server lets a user edit after the run started
# (the edit is ignored, and a column from .spec would sit next to results measured with another value).
_ACCEPTED = ".status.acceptedSpec."
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Experiment", "type": "string", "jsonPath": _ACCEPTED + "experiment"},
    {"name": "Model", "type": "string", "jsonPath": _ACCEPTED + "model"},
    {"name": "GPUs", "type": "integer", "jsonPath": _ACCEPTED + "numberGpus"},
    {"name": "Batch", "type": "integer", "jsonPath": _ACCEPTED + "batchSize"},
    {"name": "Tokens/s", "type": "number", "jsonPath": ".status.results.trainTokensPerSecond"},
    {
        # Beside the number it qualifies, in the default view: a throughput without its spread is half a number.
        "name": "CI95±%",
        "type": "number",
        "jsonPath": ".status.results.throughputCi95Percent",
        "description": "95% interval half-width in % of steady-state tokens/s (status.results.throughputCi95Percent)",
    },
    {
        "name": "CI",
        "type": "string",
        "jsonPath": ".status.results.throughputCi95Scope",
        "description": "which kind of sure: withinRun (one run's steps: repeat to confirm) or acrossRepeats",
    },
    {
        "name": "Noise",
        "type": "string",
        "jsonPath": ".status.results.measurementQuality",
        "description": "clean, or flagged: status.results.noiseFlags says why",
    },
    {
        "name": "PredMem%",
        "type": "number",
        "jsonPath": ".status.prediction.fit.predictedPercent",
        "description": "predicted peak memory per GPU, % of the GPU model's (an estimate: status.prediction)",
    },
    {"name": "PeakMem%", "type": "number", "jsonPath": ".status.results.gpuMemoryUtilizationPeakPercent"},
    {
        # The network preflight's figure (a network check's only one): empty when no preflight ran.
        "name": "BusBW",
        "type": "number",
        "jsonPath": ".status.environment.network.peakBusBandwidthGbps",
        "description": "peak bus bandwidth of the network preflight, GB/s (status.environment.network)",
    },
    {"name": "Valid", "type": "boolean", "jsonPath": ".status.isValid"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Engine", "type": "string", "jsonPath": _ACCEPTED + "engine", "priority": 1},
    {"name": "Nodes", "type": "integer", "jsonPath": _ACCEPTED + "numberNodes", "priority": 1},
    {"name": "SeqLen", "type": "integer", "jsonPath": _ACCEPTED + "modelMaxLength", "priority": 1},
    {"name": "Progress%", "type": "number", "jsonPath": ".status.progress.percent", "priority": 1},
    {
        "name": "RowsTrained",
        "type": "integer",
        "jsonPath": ".status.results.rowsTrained",
        "description": "dataset rows that kept a trained token at modelMaxLength (of RowsOffered)",
        "priority": 1,
    },
    {"name": "RowsOffered", "type": "integer", "jsonPath": ".status.results.rowsOffered", "priority": 1},
    {
        "name": "PredTok/s",
        "type": "number",
        "jsonPath": ".status.prediction.throughput.tokensPerSecondEstimate",
        "description": "predicted steady tokens/s (an estimate, before the run)",
        "priority": 1,
    },
    {
        "name": "PredMemP90",
        "type": "number",
        "jsonPath": ".status.prediction.fit.fleetAccuracy.p90PercentPoints",
        "description": "how sure PredMem% is: the out-of-sample 90th-percentile error on ado's fleet, points of the "
        "card (status.prediction.fit.fleetAccuracy says how it was validated and what lies outside the calibration)",
        "priority": 1,
    },
    {
        "name": "PredTokP90%",
        "type": "number",
        "jsonPath": ".status.prediction.throughput.accuracy.p90Percent",
        "description": "how sure PredTok/s is: the out-of-sample 90th-percentile error on ado's fleet, % "
        "(status.prediction.throughput.accuracy)",
        "priority": 1,
    },
    {
        "name": "TokPredErr%",
        "type": "number",
        "jsonPath": ".status.prediction.throughputErrorPercent",
        "description": "(predicted - measured steady tokens/s) / measured x 100",
        "priority": 1,
    },
    {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt", "priority": 1},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
]

SWEEP_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Done", "type": "string", "jsonPath": ".status.progress", "description": "finished/total points"},
    {"name": "Best Tokens/s", "type": "number", "jsonPath": ".status.bestTrainTokensPerSecond"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Running", "type": "integer", "jsonPath": ".status.counts.running", "priority": 1},
    {
        "name": "Measured",
        "type": "integer",
        "jsonPath": ".status.counts.succeeded",
        "priority": 1,
        "description": "points measured (a search measures only some)",
    },
    {"name": "Skipped", "type": "integer", "jsonPath": ".status.counts.skipped", "priority": 1},
    {
        "name": "Best Low",
        "type": "number",
        "jsonPath": ".status.best.ci95Low",
        "priority": 1,
        "description": "the best point's 95% interval, low end",
    },
    {"name": "Best High", "type": "number", "jsonPath": ".status.best.ci95High", "priority": 1},
    {
        "name": "GPU-h",
        "type": "number",
        "jsonPath": ".status.deviceHours.spent",
        "priority": 1,
        "description": "device-hours the sweep's runs spent",
    },
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
]

IMMUTABLE_SPEC_RULE = {
    "rule": "self == oldSelf",
    "message": "spec is immutable: it is the record of what was measured; create a new FineTuneExperiment "
    "(or retry this one with the ftbench.io/retry annotation)",
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return _inline({**node["allOf"][0], **rest}, defs)
    return {k: _inline(v, defs) for k, v in node.items()}


def _structural(node: Any, *, keep_defaults: bool) -> Any:
    if isinstance(node, list):
        return [_structural(n, keep_defaults=keep_defaults) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express union {any_of} structurally")
        node = {**non_null[0], **node}
    node.pop("title", None)
    if not isinstance(node.get("additionalProperties"), dict):  # a map's value schema stays
        node.pop("additionalProperties", None)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "exclusiveMinimum" in node:
        node["minimum"] = node.pop("exclusiveMinimum")
        node["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        node["maximum"] = node.pop("exclusiveMaximum")
        node["exclusiveMaximum"] = True
    if "default" in node and (not keep_defaults or node["default"] is None):
        node.pop("default")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {k: _structural(v, keep_defaults=keep_defaults) for k, v in value.items()}
        elif key == "additionalProperties":
            try:
                out[key] = _structural(value, keep_defaults=keep_defaults)
            except ValueError:  # a map of unions (the profile's model map): documented, not typed
                continue
        elif key == "items":
            out[key] = _structural(value, keep_defaults=keep_defaults)
        else:
            out[key] = value
    return out


def model_schema(model: type, *, keep_defaults: bool) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    return _structural(_inline(raw, defs), keep_defaults=keep_defaults)


def spec_schema(catalog: Catalog) -> dict[str, Any]:
    schema = model_schema(FineTuneExperimentSpec, keep_defaults=True)
    schema["properties"]["datasetId"]["enum"] = sorted(catalog.datasets)
    validations = [IMMUTABLE_SPEC_RULE]
    for rule in all_rules(catalog):
        if rule.cel:
            validations.append(
                {
                    "rule": rule.cel,
                    "message": f"{rule.summary} [{rule.id}]",
                    "fieldPath": f".{rule.field}",
                    "reason": "FieldValueInvalid",
                }
            )
    schema["x-kubernetes-validations"] = validations
    return schema


class _Names(NamedTuple):
    """What a CRD says of its kind beside the schemas."""

    plural: str
    singular: str
    short_names: tuple[str, ...]
    columns: list[dict[str, Any]]
    description: str


_NAMES: dict[str, _Names] = {
    KIND: _Names(PLURAL, SINGULAR, SHORT_NAMES, PRINTER_COLUMNS,
                 "A fine-tuning benchmark: spec says what to measure (the parameters of seed 001's SFTTrainer "
                 "experiments), status what was measured."),
    SWEEP_KIND: _Names(SWEEP_PLURAL, SWEEP_SINGULAR, SWEEP_SHORT_NAMES, SWEEP_PRINTER_COLUMNS,
                       "A benchmark sweep: spec says which configurations to measure (a FineTuneExperiment template "
                       "and a matrix), status what each one measured and which was best."),
}  # fmt: skip


def _crd(kind: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    plural, singular, short_names, columns, description = _NAMES[kind]
    status["properties"]["conditions"].update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "ftbench"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": f"{GROUP}/{VERSION}"},
                                "kind": {"type": "string", "description": kind},
                                # The API server refuses anything but a type here (metadata is implicit).
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd(catalog: Catalog | None = None) -> dict[str, Any]:
    catalog = catalog or load_catalog()
    return _crd(KIND, spec_schema(catalog), model_schema(FineTuneExperimentStatus, keep_defaults=False))


def template_schema(catalog: Catalog) -> dict[str, Any]:
    """fte.spec's fields with their types and bounds, none required (the matrix may set them) and no
    defaults or cross-field rules (each point is checked whole, as the experiment it becomes)."""
    schema = model_schema(FineTuneExperimentSpec, keep_defaults=False)
    schema.pop("required", None)
    schema["properties"]["datasetId"]["enum"] = sorted(catalog.datasets)
    schema["description"] = (
        "A FineTuneExperiment spec (`kubectl explain fte.spec`); fields the matrix sets may be left out."
    )
    return schema


def sweep_spec_schema(catalog: Catalog) -> dict[str, Any]:
    schema = model_schema(FineTuneSweepSpec, keep_defaults=True)
    schema["properties"]["template"] = template_schema(catalog)
    fields = sorted(spec_fields())
    schema["x-kubernetes-validations"] = [
        {**IMMUTABLE_SPEC_RULE, "message": "spec is immutable: it is the record of what was measured; create a new "
         "FineTuneSweep (with spec.reuse: true, points already measured are not run again)"},
        {"rule": f"self.matrix.all(k, k in {json.dumps(fields)})",
         "message": "matrix keys are FineTuneExperiment spec fields (kubectl explain fte.spec; run.<field> for run "
         "settings) [sweep.field]", "fieldPath": ".matrix", "reason": "FieldValueInvalid"},
    ]  # fmt: skip
    return schema


def sweep_crd(catalog: Catalog | None = None) -> dict[str, Any]:
    catalog = catalog or load_catalog()
    return _crd(SWEEP_KIND, sweep_spec_schema(catalog), _sweep_status_schema(catalog))


def _sweep_status_schema(catalog: Catalog) -> dict[str, Any]:
    """The status, whose acceptedSpec holds a template as the spec does (typed, not pruned)."""
    schema = model_schema(FineTuneSweepStatus, keep_defaults=False)
    schema["properties"]["acceptedSpec"]["properties"]["template"] = template_schema(catalog)
    return schema


def all_crds(catalog: Catalog | None = None) -> dict[str, dict[str, Any]]:
    """File name -> CRD, for every resource ftbench defines."""
    catalog = catalog or load_catalog()
    return {CRD_FILENAME: crd(catalog), SWEEP_CRD_FILENAME: sweep_crd(catalog)}


def crd_yaml(catalog: Catalog | None = None, document: dict[str, Any] | None = None) -> str:
    header = "# Generated by `ftbench crd` from ftbench/api (pydantic models). Do not edit by hand.\n"
    return header + yaml.safe_dump(document or crd(catalog), sort_keys=False, width=120)
