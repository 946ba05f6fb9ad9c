"""A cluster profile's model map reaches validation and rendering (CLI and operator share catalog_for)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ftbench.api.profile import ClusterProfile, catalog_for
from ftbench.api.validation import validate_spec_dict
from ftbench.cli import main

PROFILE = "modelMap:\n  my-llama:\n    Vanilla: /weights/my-llama\n"
SPEC = {"model": "my-llama", "modelMaxLength": 512, "numberGpus": 2, "batchSize": 2, "gpuModel": "G",
        "distributedBackend": "DDP"}  # fmt: skip


def test_profile_model_map_extends_the_catalog() -> None:
    profile = ClusterProfile.model_validate({"modelMap": {"my-llama": {"Vanilla": "/weights/my-llama"}}})
    assert validate_spec_dict(SPEC, catalog_for(profile)).ok
    assert not validate_spec_dict(SPEC, catalog_for(ClusterProfile())).ok


def test_bad_model_map_is_rejected_when_the_profile_loads() -> None:
    with pytest.raises(ValidationError, match="unknown weights type"):
        ClusterProfile.model_validate({"modelMap": {"x": {"Quantised": "a/b"}}})


@pytest.mark.parametrize("model_map", [{"x": {"Vanilla": "--max_steps"}}, {"-x": {"Vanilla": "a/b"}},
                                       {"x": {"Vanilla": "a b"}}, {"x": {"Vanilla": "a" * 600}}])  # fmt: skip
def test_model_map_refs_that_could_read_as_flags_are_rejected(model_map: dict) -> None:
    """Issue 12: model-map names and ids become trainer arguments; none may start with '-'."""
    with pytest.raises(ValidationError, match="is not a model name"):
        ClusterProfile.model_validate({"modelMap": model_map})


def test_render_uses_the_profile_model_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "profile.yaml").write_text(PROFILE)
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "apiVersion: ftbench.io/v1alpha1\nkind: FineTuneExperiment\nmetadata: {name: mine}\nspec:\n"
        + "".join(f"  {k}: {v}\n" for k, v in SPEC.items())
    )
    assert main(["render", str(exp), "--profile", str(tmp_path / "profile.yaml")]) == 0
    assert "/weights/my-llama" in capsys.readouterr().out
