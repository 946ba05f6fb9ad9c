"""The cluster profile: documented field by field, validated, and defaulting to a plain GPU cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from ftbench.api.profile import ClusterProfile
from ftbench.api.validation import load_profile


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for name, info in model.model_fields.items():
        out.append((prefix + name, info))
        for candidate in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out += _fields(candidate, f"{prefix}{name}.")
    return out


def test_every_profile_field_is_documented() -> None:
    undocumented = [name for name, info in _fields(ClusterProfile) if not info.description]
    assert not undocumented


def test_defaults_and_yaml(tmp_path: Path) -> None:
    assert load_profile(None) == ClusterProfile()
    path = tmp_path / "profile.yaml"
    path.write_text("gpuResource: amd.com/gpu\nroce: {deviceCount: 4}\nfeatures: {trainingOperator: true}\n")
    profile = load_profile(path)
    assert (profile.gpu_resource, profile.roce.device_count, profile.features.training_operator) == (
        "amd.com/gpu",
        4,
        True,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"gpuResourse": "typo"},
        {"roce": {"ncclEnv": {"NOT-AN-ENV": "1"}}},
        {"tolerations": [{"operator": "Sometimes"}]},
        {"storage": {"models": {"mountPath": "relative"}}},
        {"shmSize": "lots"},
    ],
)
def test_invalid_profiles_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ClusterProfile.model_validate(bad)
