"""The FineTuneExperiment API (`ftbench.io/v1alpha1`): the spec and status models are the API.

Everything here imports with pydantic and pyyaml alone so that the CLI, the operator image
(no torch) and the trainer image (no kopf) share one definition.
"""

from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION, FineTuneExperiment
from ftbench.api.run_settings import RunSettings
from ftbench.api.spec import FineTuneExperimentSpec

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
