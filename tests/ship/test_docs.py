"""Generated reference docs are fresh, `ftbench docs --check` says so, and every page mentions what
it is generated from (so a new field, metric, model or profile setting is documented or fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.cli.main import main
from ftbench.contracts.results import Metrics
from ftbench.generated.docs import generate_all

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GENERATED = generate_all()


@pytest.mark.parametrize("relative", sorted(GENERATED))
def test_generated_page_is_fresh(relative: str) -> None:
    path = DOCS / relative
    assert path.is_file(), f"{path} missing: run `ftbench docs -o docs`"
    assert path.read_text() == GENERATED[relative], f"{path} is stale: run `ftbench docs -o docs`"


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "-o", str(tmp_path), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(["docs", "-o", str(tmp_path)]) == 0
    assert main(["docs", "-o", str(tmp_path), "--check"]) == 0
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(GENERATED)


def test_pages_cover_their_sources() -> None:
    crd_page = GENERATED["reference/crd.md"]
    for field in FineTuneExperimentSpec.model_fields.values():
        assert f"`{field.alias}`" in crd_page
    metrics_page = GENERATED["reference/measured-properties.md"]
    for field in Metrics.model_fields.values():
        assert f"`{field.alias}`" in metrics_page
    catalog_page = GENERATED["reference/experiments.md"]
    catalog = load_catalog()
    for name in [*catalog.experiments, *catalog.models, *catalog.datasets]:
        assert f"{name}" in catalog_page
    profile_page = GENERATED["reference/cluster-profile.md"]
    for field in ClusterProfile.model_fields.values():
        assert f"`{field.alias}`" in profile_page


def test_relative_links_resolve() -> None:
    """Links between docs pages (handwritten and generated) point at files that exist."""
    pending = {"measurements.md", "benchmarks.md"}  # written in other issues
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)\s#:]+\.(?:md|yaml))(?:#[^)]*)?\)", page.read_text()):
            resolved = page.parent / target
            assert resolved.exists() or resolved.name in pending, f"{page.relative_to(REPO)}: broken link {target}"
