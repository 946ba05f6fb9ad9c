"""Expanding a sweep's matrix into points, and the sweep-level (structural) checks.

A point is the template with the point's values set. Points are numbered in matrix order
(`itertools.product` over the matrix fields in the order written), then `include` entries in
order; `exclude` drops product points before `include` adds its own (GitHub Actions' order).
Each point is validated as the FineTuneExperiment it becomes: an invalid point is a measurement
(isValid false, with the reason) and gets no child. A structurally bad sweep (unknown fields,
no points, too many) gets no point at all.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ftbench.api import effective
from ftbench.api.resource import API_VERSION, SWEEP_KIND
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import MAX_POINTS, RUN_PREFIX, FineTuneSweepSpec, spec_fields
from ftbench.api.validation import Issue, issue_from_pydantic, validate_spec_dict
from ftbench.api.wire_keys import metadata_problems, name_problem, unknown_keys
from ftbench.catalog import Catalog
from ftbench.contracts.enums import OomPrecheck
from ftbench.predict.fleet_accuracy import question, throughput_accuracy
from ftbench.predict.throughput import predict_throughput


@dataclass(frozen=True)
class SweepPoint:
    """One configuration of the sweep."""

    index: int
    values: Mapping[str, Any]  # the varied fields' values, for the table and plots
    wire: Mapping[str, Any]  # the FineTuneExperiment spec this point runs (wire form)
    spec: FineTuneExperimentSpec | None  # None when invalid
    issues: tuple[Issue, ...] = ()
    # What a search ranks it by (spec.search only): predicted tokens/s in all and its relative band (p90 / 100).
    predicted_tokens_per_second: float | None = None
    predicted_band: float | None = None

    @property
    def valid(self) -> bool:
        return self.spec is not None and not self.issues

    def describe(self) -> str:
        """`batchSize=4, modelMaxLength=512`: how messages name a point."""
        return ", ".join(f"{k}={json.dumps(v)}" for k, v in self.values.items()) or f"point {self.index}"


@dataclass(frozen=True)
class Expansion:
    points: tuple[SweepPoint, ...] = ()
    issues: tuple[Issue, ...] = field(default_factory=tuple)  # structural: the sweep is Invalid

    @property
    def ok(self) -> bool:
        return not self.issues


def _set(wire: dict[str, Any], key: str, value: Any) -> None:
    if key.startswith(RUN_PREFIX):
        run = wire.setdefault("run", {})
        if isinstance(run, dict):
            run[key.removeprefix(RUN_PREFIX)] = copy.deepcopy(value)
    else:
        wire[key] = copy.deepcopy(value)


def _get(wire: Mapping[str, Any], key: str) -> Any:
    if key.startswith(RUN_PREFIX):
        run = wire.get("run")
        return run.get(key.removeprefix(RUN_PREFIX)) if isinstance(run, dict) else None
    return wire.get(key)


def _key_issues(where: str, keys: Any, allowed: frozenset[str]) -> list[Issue]:
    return [
        Issue(f"{where}.{key}", key, "sweep.field", "is not a FineTuneExperiment spec field (use the names of "
              "`kubectl explain fte.spec`, and run.<field> for run settings)")
        for key in keys
        if key not in allowed
    ]  # fmt: skip


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def _empty_value_issues(where: str, values: list[Any], *, single: bool = False) -> list[Issue]:
    """A null or empty value is refused, never dropped: null would silently mean "the default" (and
    vanish from the point's values), and an empty string or list is no value of any spec field."""
    return [
        Issue(where if single else f"{where}[{i}]", value, "sweep.empty-value",
              f"{json.dumps(value)} is not a value: a null or empty entry would silently run the template's "
              "value instead; remove it, or write the value to run (for the template's or the default value, "
              "write that value)")
        for i, value in enumerate(values)
        if _is_empty(value)
    ]  # fmt: skip


def structural_issues(spec: FineTuneSweepSpec) -> list[Issue]:
    """What makes the whole sweep unusable, before any point is built."""
    allowed = spec_fields()
    issues: list[Issue] = []
    template_keys = [k for k in spec.template if k != "run"]
    issues += _key_issues("spec.template", template_keys, allowed)
    if "run" in spec.template and not isinstance(spec.template["run"], dict):
        issues.append(Issue("spec.template.run", spec.template["run"], "sweep.field", "must be a mapping"))
    issues += _key_issues("spec.matrix", spec.matrix, allowed)
    for i, entry in enumerate(spec.include):
        issues += _key_issues(f"spec.include[{i}]", entry, allowed)
        if not entry:
            issues.append(Issue(f"spec.include[{i}]", entry, "sweep.include", "an include entry sets no field"))
    for i, entry in enumerate(spec.exclude):
        unknown = [k for k in entry if k not in spec.matrix]
        issues += [
            Issue(f"spec.exclude[{i}].{k}", entry[k], "sweep.exclude", "names a field the matrix does not vary")
            for k in unknown
        ]
        if not entry:
            issues.append(Issue(f"spec.exclude[{i}]", entry, "sweep.exclude", "an exclude entry matches every point"))
    for key, values in spec.matrix.items():
        if not values:
            issues.append(Issue(f"spec.matrix.{key}", values, "sweep.matrix", "needs at least one value"))
        issues += _empty_value_issues(f"spec.matrix.{key}", values)
    for i, entry in enumerate(spec.include):
        for key, value in entry.items():
            issues += _empty_value_issues(f"spec.include[{i}].{key}", [value], single=True)
    product = math.prod(len(v) for v in spec.matrix.values()) if spec.matrix else (0 if spec.include else 1)
    if product + len(spec.include) > MAX_POINTS:
        issues.append(
            Issue("spec.matrix", f"{product} + {len(spec.include)} points", "sweep.size",
                  f"a sweep has at most {MAX_POINTS} points: split it into several sweeps")
        )  # fmt: skip
    return issues


def _matches(values: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    return all(k in values and values[k] == v for k, v in entry.items())


def expand(spec: FineTuneSweepSpec, catalog: Catalog, *, ran: bool = False) -> Expansion:
    """Every point of the sweep, validated; or the structural issues and no point. `ran`: the sweep
    already ran (a report of a stored one), so that no point passes today's validation is no reason
    to hide what its points measured."""
    issues = structural_issues(spec)
    if issues:
        return Expansion(issues=tuple(issues))
    keys = list(spec.matrix)
    combos: list[dict[str, Any]] = []
    if keys:
        for combo in itertools.product(*(spec.matrix[k] for k in keys)):
            values = dict(zip(keys, combo, strict=True))
            if not any(_matches(values, entry) for entry in spec.exclude):
                combos.append(values)
    elif not spec.include:
        combos.append({})  # no matrix: the template alone is the one point
    varied = keys + [k for entry in spec.include for k in entry if k not in keys]
    varied = list(dict.fromkeys(varied))
    wires: list[dict[str, Any]] = []
    for values in [*combos, *spec.include]:
        wire = copy.deepcopy(spec.template)
        for key, value in values.items():
            _set(wire, key, value)
        if wire not in wires:  # an include entry equal to a product point adds nothing
            wires.append(wire)
    if not wires:
        return Expansion(issues=(Issue("spec.exclude", None, "sweep.empty", "excludes every point: nothing to run"),))
    points = []
    for index, wire in enumerate(wires):
        report = validate_spec_dict(wire, catalog)
        full = report.spec.to_wire() if report.spec is not None else wire
        values = {k: _get(full, k) for k in varied}
        refused = (*report.issues, *_not_a_measurement(report.spec))
        runnable = report.spec if report.ok and not refused else None
        predicted, band = predicted_throughput(runnable, catalog) if spec.search and runnable else (None, None)
        points.append(SweepPoint(index, values, wire, runnable, refused, predicted, band))
    if not ran and not any(p.valid for p in points):  # every point would be refused: the sweep would measure nothing
        first = points[0]
        why = "; ".join(str(i) for i in first.issues[:2])
        return Expansion(issues=(Issue("spec", f"{len(points)} points", "sweep.no-runnable-point",
                                       f"no point can run, so the sweep would measure nothing: fix the template or "
                                       f"the matrix (point 0, {first.describe() or 'the template'}: {why})"),))  # fmt: skip
    return Expansion(points=tuple(points))


def predicted_throughput(spec: FineTuneExperimentSpec, catalog: Catalog) -> tuple[float | None, float | None]:
    """A point's predicted tokens/s and the relative 90th-percentile band ftbench quotes for it (None: no prediction:
    a CPU run, a model without an architecture)."""
    predicted = predict_throughput(spec, catalog)
    if predicted is None:
        return None, None
    accuracy = throughput_accuracy(question(spec, catalog))
    return predicted.tokens_per_second_estimate, (accuracy.p90_percent / 100 if accuracy else None)


def launch_wire(sweep: FineTuneSweepSpec, point: SweepPoint) -> dict[str, Any]:
    """The spec a point's experiment is created with: the point's, with the sweep's skipPredictedOom as
    run.oomPrecheck (refuse: a point predicted not to fit is not launched) unless the point sets it."""
    wire = copy.deepcopy(dict(point.wire))
    run = wire.get("run") or {}
    if "oomPrecheck" not in run:
        precheck = OomPrecheck.REFUSE if sweep.skip_predicted_oom else OomPrecheck.WARN
        wire["run"] = {**run, "oomPrecheck": precheck.value}
    return wire


def _not_a_measurement(spec: FineTuneExperimentSpec | None) -> tuple[Issue, ...]:
    """A sweep compares training measurements: a network check (run.networkPreflight only) trains
    nothing, so it is an invalid point with the reason (a FineTuneExperiment runs it)."""
    if spec is None or not effective.network_check_only(spec):
        return ()
    message = (
        "networkPreflight only trains nothing, so the point has no measurement to compare; run the check as a "
        "FineTuneExperiment, and sweep with networkPreflight on to get the figures beside each measurement"
    )
    return (Issue("run.networkPreflight", "only", "sweep.network-check-only", message),)


@dataclass(frozen=True)
class SweepDocument:
    """A FineTuneSweep read from YAML: its name and spec, or why it cannot be one."""

    name: str | None
    spec: FineTuneSweepSpec | None
    issues: tuple[Issue, ...] = ()


def parse_sweep_document(doc: Any) -> SweepDocument:
    """The document's header and spec types checked; the points are checked by `expand`."""
    if not isinstance(doc, dict):
        return SweepDocument(None, None, (Issue("<document>", doc, "schema", "expected a FineTuneSweep mapping"),))
    issues = []
    if doc.get("apiVersion") != API_VERSION:
        issues.append(Issue("apiVersion", doc.get("apiVersion"), "schema", f"must be {API_VERSION}"))
    if doc.get("kind") != SWEEP_KIND:
        issues.append(Issue("kind", doc.get("kind"), "schema", f"must be {SWEEP_KIND}"))
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    problem = name_problem(name, "sweep")
    if problem:
        issues.append(Issue("metadata.name", name, "schema", problem))
    issues += [Issue(path, value, "schema", message) for path, value, message in metadata_problems(metadata)]
    raw = doc.get("spec")
    if not isinstance(raw, dict):
        return SweepDocument(name, None, (*issues, Issue("spec", raw, "schema", "spec is required (a mapping)")))
    issues += [
        Issue(path, key, "schema", message)
        for path, key, message in unknown_keys(raw, FineTuneSweepSpec, "spec", "FineTuneSweep")
    ]
    try:
        spec = FineTuneSweepSpec.model_validate_json(json.dumps(raw, default=str), strict=True)  # as the server types
    except ValidationError as err:
        typed = (issue_from_pydantic(e, raw, "spec") for e in err.errors() if e["type"] != "extra_forbidden")
        return SweepDocument(name, None, (*issues, *typed))
    return SweepDocument(name, spec if not issues else None, tuple(issues))
