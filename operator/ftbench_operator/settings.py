"""The operator's configuration: one frozen object read from the environment at startup.

Plain pydantic (pydantic-settings is not a dependency): every field is `FTBENCH_OPERATOR_<NAME>`
in upper case, so the Helm chart sets them as container env and tests set them per subprocess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ftbench.contracts.env import POD_NAMESPACE, operator_setting

# Where the chart installs the operator (README); the profile namespace outside a pod.
DEFAULT_PROFILE_NAMESPACE = "ftbench-system"


class OperatorSettings(BaseModel):
    """Knobs an operator deployment may need to turn; defaults suit a production cluster."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus port; 0 disables the endpoint.")
    profile_config_map: str = Field(
        "ftbench-profile", description="ConfigMap holding the cluster profile (key `profileKey`)."
    )
    profile_namespace: str = Field(
        DEFAULT_PROFILE_NAMESPACE,
        min_length=1,
        description="The one namespace the profile ConfigMap is read from: this variable, else the operator's own "
        "namespace (POD_NAMESPACE), else ftbench-system. Never any namespace: a tenant's labelled ConfigMap "
        "would set images and security settings for everyone.",
    )
    profile_key: str = Field("profile.yaml", description="Key of the profile YAML in the ConfigMap.")
    profile_file: Path | None = Field(None, description="Profile YAML file for local runs (re-read when it changes).")
    image_pull_grace_seconds: float = Field(
        300.0, ge=0, description="How long ImagePullBackOff/ErrImagePull may persist before the run fails."
    )
    watch_server_timeout_seconds: int = Field(300, ge=1, description="Watch request timeout asked of the server.")
    watch_client_timeout_seconds: int = Field(330, ge=1, description="Client-side watch timeout (> server's).")
    api_threads: int = Field(
        16, ge=1, le=64, description="Threads (and pooled connections) for blocking Kubernetes API calls."
    )
    api_retry_delay_seconds: float = Field(5.0, gt=0, description="First backoff delay after an API error.")
    predictor_url: str | None = Field(
        None,
        description="Base URL of the memory predictor service (the chart's predictor, e.g. "
        "http://ftbench-predictor.ftbench-system:8470); unset: no predictions (spec.run.oomPrecheck has no effect "
        "and condition MemoryFits says so).",
    )
    predictor_timeout_seconds: float = Field(
        120.0, gt=0, description="How long one prediction may take (a 70B model traces in well under a minute)."
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        """Read `FTBENCH_OPERATOR_*`; unknown variables are ignored, bad values raise (fail fast at startup)."""
        environ = os.environ if environ is None else environ
        values = {
            name: environ[operator_setting(name)] for name in cls.model_fields if operator_setting(name) in environ
        }
        if "profile_namespace" not in values and environ.get(POD_NAMESPACE):
            values["profile_namespace"] = environ[POD_NAMESPACE]
        return cls.model_validate(values)
