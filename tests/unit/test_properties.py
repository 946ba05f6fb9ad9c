"""Property-based: validation never crashes, reports every violated seed rule, round-trips YAML."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict

from .strategies import json_values, wire_specs

settings.register_profile("ftbench", deadline=None, max_examples=200)
settings.load_profile("ftbench")


@given(st.dictionaries(st.text(max_size=12), json_values, max_size=8) | json_values)
def test_garbage_never_crashes(raw: object) -> None:
    report = validate_spec_dict(raw)
    assert report.spec is not None or report.issues


@given(wire_specs(), st.dictionaries(st.sampled_from(["batchSize", "numberGpus", "fastMoe"]), json_values))
def test_wrong_types_never_crash(raw: dict, junk: dict) -> None:
    report = validate_spec_dict({**raw, **junk})
    assert report.spec is not None or report.issues


def _seed_violations(raw: dict) -> set[str]:
    """An independent oracle for the seed rules that need no catalog."""
    gpus, nodes, fast_moe = raw["numberGpus"], raw.get("numberNodes", 1), raw.get("fastMoe", 0)
    found = set()
    if raw["batchSize"] % max(1, gpus):
        found.add("is_valid.1")
    if gpus % nodes:
        found.add("is_valid.2")
    if gpus > 0 and not raw.get("gpuModel"):
        found.add("is_valid.5")
    if fast_moe and gpus % fast_moe:
        found.add("is_valid.6")
    return found


@given(wire_specs())
def test_every_violated_seed_rule_is_reported(raw: dict) -> None:
    report = validate_spec_dict(raw)
    assert report.spec is not None
    reported = {i.rule for i in report.issues}
    assert _seed_violations(raw) <= reported


@given(wire_specs())
def test_valid_specs_round_trip_through_yaml(raw: dict) -> None:
    report = validate_spec_dict(raw)
    if not report.ok:
        return
    assert report.spec is not None
    text = yaml.safe_dump(report.spec.to_wire())
    again = FineTuneExperimentSpec.model_validate(yaml.safe_load(text))
    assert again == report.spec
    assert validate_spec_dict(yaml.safe_load(text)).ok
