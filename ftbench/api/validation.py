"""Validation used by the CLI, the operator and tests: types and ranges (pydantic), then the rules.

Every problem becomes an `Issue` naming the field path, the value, the rule and the fix, so the
same text reaches a terminal (`ftbench validate`), a status condition and an Event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ftbench.api import strict_yaml
from ftbench.api.bounds import PATTERN_WORDS
from ftbench.api.profile import ClusterProfile
from ftbench.api.resource import API_VERSION, KIND
from ftbench.api.rules import all_rules
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.wire_keys import metadata_problems, name_problem, unknown_keys
from ftbench.catalog import Catalog, load_catalog

# Seed 001's is_valid rules 3 and 4 are plain ranges: report them under the seed's rule ids.
_SEED_RANGE_RULES: dict[tuple[str, ...], str] = {("numberNodes",): "is_valid.3", ("batchSize",): "is_valid.4"}
_MISSING = object()


@dataclass(frozen=True)
class Issue:
    path: str
    value: Any
    rule: str
    message: str

    def __str__(self) -> str:
        shown = "" if self.value is _MISSING else f" (value: {self.value!r})"
        return f"{self.path}{shown}: {self.message} [{self.rule}]"


@dataclass
class ValidationReport:
    spec: FineTuneExperimentSpec | None
    issues: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.issues

    def summary(self) -> str:
        return "; ".join(str(i) for i in self.issues)


def validate_spec_dict(
    raw: Any, catalog: Catalog | None = None, *, prefix: str = "spec", profile: ClusterProfile | None = None
) -> ValidationReport:
    """Parse a wire-format spec and run every rule (and the profile's, given one); never raises on bad input."""
    catalog = catalog or load_catalog()
    if not isinstance(raw, dict):
        return ValidationReport(None, [Issue(prefix, raw, "schema", "expected a mapping of spec fields")])
    keys = [
        Issue(path, key, "schema", message)
        for path, key, message in unknown_keys(raw, FineTuneExperimentSpec, prefix, "FineTuneExperiment")
    ]
    try:
        # Strict JSON types, as the API server checks them: "8" is no integer and "true" no boolean.
        spec = FineTuneExperimentSpec.model_validate_json(json.dumps(raw, default=str), strict=True)
    except ValidationError as err:
        typed = [issue_from_pydantic(e, raw, prefix) for e in err.errors() if e["type"] != "extra_forbidden"]
        return ValidationReport(None, [*keys, *typed])
    if keys:  # the server would refuse (or drop) them: what it stores is not what was written
        return ValidationReport(None, keys)
    issues = check_rules(spec, catalog, prefix=prefix)
    if profile is not None:
        issues += check_profile_rules(spec, profile, catalog, prefix=prefix, spec_ok=not issues)
    return ValidationReport(spec, issues)


def check_rules(spec: FineTuneExperimentSpec, catalog: Catalog, *, prefix: str = "spec") -> list[Issue]:
    wire = spec.to_wire()
    issues = []
    for rule in all_rules(catalog):
        problem = rule.check(spec, catalog)
        if problem:
            value = _lookup(wire, tuple(rule.field.split(".")))
            issues.append(Issue(f"{prefix}.{rule.field}", value, rule.id, problem))
    return issues


def check_profile_rules(
    spec: FineTuneExperimentSpec,
    profile: ClusterProfile,
    catalog: Catalog,
    *,
    prefix: str = "spec",
    spec_ok: bool = True,
) -> list[Issue]:
    """What this cluster refuses: its allow-lists and, for a spec that passed every rule (`spec_ok`),
    what the render step would refuse here (the runtime it gets, what the images lack: the same
    functions, so validate, render and the operator give one answer). Needs the profile, so not in
    `all_rules`."""
    from ftbench.api.rules.bounds import priority_class_allowed  # it imports the profile, which imports spec
    from ftbench.api.runtime_choice import profile_refusals

    wire = spec.to_wire()
    issues = []
    if (problem := priority_class_allowed(spec, profile)) is not None:
        field = "run.priorityClassName"
        issues.append(Issue(f"{prefix}.{field}", spec.run.priority_class_name, "profile.priority-class", problem))
    for refusal in profile_refusals(spec, catalog, profile) if spec_ok else []:
        value = _lookup(wire, tuple(refusal.field.split(".")))
        issues.append(Issue(f"{prefix}.{refusal.field}", value, refusal.rule_id, refusal.message))
    return issues


def validate_document(
    doc: Any, catalog: Catalog | None = None, *, profile: ClusterProfile | None = None
) -> ValidationReport:
    """Validate a whole FineTuneExperiment document (as read from YAML)."""
    if not isinstance(doc, dict):
        return ValidationReport(None, [Issue("<document>", doc, "schema", "expected a FineTuneExperiment mapping")])
    issues = []
    if doc.get("apiVersion") != API_VERSION:
        issues.append(Issue("apiVersion", doc.get("apiVersion", _MISSING), "schema", f"must be {API_VERSION}"))
    if doc.get("kind") != KIND:
        issues.append(Issue("kind", doc.get("kind", _MISSING), "schema", f"must be {KIND}"))
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    problem = name_problem(name, "experiment")
    if problem:
        issues.append(Issue("metadata.name", name if name else _MISSING, "schema", problem))
    issues += [Issue(path, value, "schema", message) for path, value, message in metadata_problems(doc.get("metadata"))]
    report = validate_spec_dict(doc.get("spec", _MISSING) if "spec" in doc else {}, catalog, profile=profile)
    if "spec" not in doc:
        return ValidationReport(None, [*issues, Issue("spec", _MISSING, "schema", "spec is required")])
    return ValidationReport(report.spec, [*issues, *report.issues])


def issue_from_pydantic(error: Any, raw: dict, prefix: str) -> Issue:
    loc: tuple[str, ...] = tuple(str(p) for p in error["loc"])
    value = _lookup(raw, loc)
    rule = _SEED_RANGE_RULES.get(loc, "schema")
    kind = error["type"]
    if kind == "missing":
        message = "is required"
    elif kind == "extra_forbidden":
        message = "is not a FineTuneExperiment field; check the spelling (`ftbench crd` or kubectl explain fte.spec)"
    elif kind in ("enum", "literal_error"):
        message = error["msg"].replace("Input should be", "must be one of")
    elif kind == "string_pattern_mismatch" and (words := PATTERN_WORDS.get(error["ctx"]["pattern"])):
        message = f"must be {words}"
    else:
        message = error["msg"].removeprefix("Value error, ")
    return Issue(".".join((prefix, *loc)), value, rule, message)


def profile_issues(err: ValidationError, raw: Any) -> list[Issue]:
    """A cluster profile's problems, each with its field, value and what it must be (as a spec's)."""
    return [issue_from_pydantic(e, raw if isinstance(raw, dict) else {}, "profile") for e in err.errors()]


def load_profile(path: str | Path | None) -> ClusterProfile:
    """The profile file at `path` (defaults without one), checked as `load_checked_profile` says."""
    if path is None:
        return ClusterProfile()
    return load_checked_profile(Path(path).read_text(), str(path))


def load_checked_profile(text: str, origin: str) -> ClusterProfile:
    """The profile in `text` (YAML, duplicate keys refused); ValueError with one line naming every bad
    field, its value and what it must be (`ftbench validate/render --profile`, the operator at start-up)."""
    try:
        raw = strict_yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"cluster profile {origin} is not valid YAML: {' '.join(str(err).split())}") from err
    try:
        return ClusterProfile.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(str(i).removeprefix("profile.") for i in profile_issues(err, raw))
        raise ValueError(f"cluster profile {origin} is invalid: {problems}") from err


def _lookup(raw: Any, loc: tuple[str, ...]) -> Any:
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node
