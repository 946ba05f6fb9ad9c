"""The FineTuneExperiment API (`ftbench.io/v1alpha1`): the spec and status models are the API.

Everything here imports with pydantic and pyyaml alone so that the CLI, the operator image
(no torch) and the trainer image (no kopf) share one definition. The names below are imported on
first use: `ftbench predict` reads a spec and never builds the status models' ~60 pydantic classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION, FineTuneExperiment
    from ftbench.api.run_settings import RunSettings
    from ftbench.api.spec import FineTuneExperimentSpec

_WHERE = {
    "API_VERSION": "resource",
    "GROUP": "resource",
    "KIND": "resource",
    "PLURAL": "resource",
    "VERSION": "resource",
    "FineTuneExperiment": "resource",
    "RunSettings": "run_settings",
    "FineTuneExperimentSpec": "spec",
}

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "FineTuneExperiment",
    "FineTuneExperimentSpec",
    "RunSettings",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
