"""Golden manifests: the reviewable YAML of what each experiment turns into on a cluster.

A change to the rendered objects shows up as a diff of tests/golden/render/*.yaml in review.
Regenerate with FTBENCH_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import pytest

from ftbench.render.manifests import manifests_yaml
from tests.unit.render_cases import CASE_IDS, CASES, Case, update_golden


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden(case: Case) -> None:
    text = manifests_yaml(case.render().objects)
    if update_golden():
        case.golden.parent.mkdir(parents=True, exist_ok=True)
        case.golden.write_text(text)
    assert case.golden.exists(), f"{case.golden} is missing; run with FTBENCH_UPDATE_GOLDEN=1"
    assert text == case.golden.read_text(), f"{case.name} differs from its golden file; review and regenerate"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_render_is_deterministic(case: Case) -> None:
    assert case.render().objects == case.render().objects
