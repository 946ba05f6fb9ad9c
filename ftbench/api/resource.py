"""The whole `FineTuneExperiment` object and the names Kubernetes knows it by."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.kinds import (  # noqa: F401  (re-exported: the names Kubernetes knows the resources by)
    ANNOTATION_PREFIX,
    API_VERSION,
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
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import FineTuneExperimentStatus


class FineTuneExperiment(ApiModel):
    """A fine-tuning benchmark: the spec says what to measure, the status what was measured."""

    api_version: Literal["ftbench.io/v1alpha1"] = Field(API_VERSION, description="ftbench.io/v1alpha1")
    kind: Literal["FineTuneExperiment"] = Field(KIND, description="FineTuneExperiment")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: FineTuneExperimentSpec
    status: FineTuneExperimentStatus | None = None
