"""The names Kubernetes knows ftbench's resources by (what a command reads before it needs the models)."""

from __future__ import annotations

from typing import Final

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
