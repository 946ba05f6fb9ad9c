"""Each rule's CEL twin (in the CRD) decides exactly like its Python check, on generated specs.

cel-python evaluates the expressions; the object is the spec as the API server sees it after
defaulting (every default present, unset optional fields absent).
"""

from __future__ import annotations

import celpy
import pytest
from hypothesis import given

from ftbench.api.rules import all_rules
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog

from .strategies import wire_specs

CATALOG = load_catalog()
CEL_RULES = [r for r in all_rules(CATALOG) if r.cel]
_ENV = celpy.Environment()
PROGRAMS = {r.id: _ENV.program(_ENV.compile(r.cel)) for r in CEL_RULES}


def test_every_catalog_free_rule_has_cel() -> None:
    ids = {r.id for r in CEL_RULES}
    assert {"is_valid.1", "is_valid.2", "is_valid.5", "is_valid.6"} <= ids
    assert "experiment.full_stability.fixed" in ids
    assert len(ids) == len(CEL_RULES), "rule ids must be unique"


@pytest.mark.parametrize("rule", CEL_RULES, ids=lambda r: r.id)
def test_cel_compiles(rule) -> None:
    assert rule.id in PROGRAMS


@given(wire_specs())
def test_cel_agrees_with_python(raw: dict) -> None:
    spec = FineTuneExperimentSpec.model_validate(raw)
    activation = {"self": celpy.json_to_cel(spec.to_wire())}
    for rule in CEL_RULES:
        python_ok = rule.check(spec, CATALOG) is None
        cel_ok = bool(PROGRAMS[rule.id].evaluate(activation))
        assert python_ok == cel_ok, (rule.id, rule.cel, spec.to_wire())
