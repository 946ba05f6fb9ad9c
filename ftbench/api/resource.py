"""The whole `FineTuneExperiment` object and the names Kubernetes knows it by."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from ftbench.api.api_model import ApiModel
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.status import FineTuneExperimentStatus

GROUP = "ftbench.io"
VERSION = "v1alpha1"
API_VERSION: Final = "ftbench.io/v1alpha1"  # a literal, so the model field can be typed by it
assert f"{GROUP}/{VERSION}" == API_VERSION
KIND: Final = "FineTuneExperiment"
PLURAL = "finetuneexperiments"
SINGULAR = "finetuneexperiment"
SHORT_NAMES = ("fte",)
CATEGORIES = ("ftbench",)
ANNOTATION_PREFIX = "ftbench.io"

# FineTuneSweep (ftbench.api.sweep): many experiments over a space of configurations.
SWEEP_KIND: Final = "FineTuneSweep"
SWEEP_PLURAL = "finetunesweeps"
SWEEP_SINGULAR = "finetunesweep"
SWEEP_SHORT_NAMES = ("fts",)


class FineTuneExperiment(ApiModel):
    """A fine-tuning benchmark: the spec says what to measure, the status what was measured."""

    api_version: Literal["ftbench.io/v1alpha1"] = Field(API_VERSION, description="ftbench.io/v1alpha1")
    kind: Literal["FineTuneExperiment"] = Field(KIND, description="FineTuneExperiment")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: FineTuneExperimentSpec
    status: FineTuneExperimentStatus | None = None
