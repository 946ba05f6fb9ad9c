"""The cluster profile the operator renders with: a ConfigMap in-cluster, a file for local runs.

Re-read on change (the ConfigMap through a watch, the file by its mtime) so a chart upgrade or
an edited file applies to the next experiment without a restart. A broken profile never stops
the operator: it is logged and the last good one stays in use.

`features` a profile leaves unset are taken from the server (its Kubernetes minor version,
whether the PyTorchJob CRD is installed, and whether Kubeflow Trainer v2 is: its TrainJob CRD and
the ClusterTrainingRuntime the profile names): the same profile then works on a 1.20 test
control plane and on a current cluster. The runtime is matched against the *current* profile, so
a profile that switches `trainJob.runtimeName` is re-checked against what the server had.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ftbench.api.profile import ClusterProfile, Features
from ftbench.api.validation import load_checked_profile

log = logging.getLogger(__name__)


class ProfileError(ValueError):
    """The profile document is not valid YAML or not a ClusterProfile."""


def parse_profile(text: str, origin: str = "document") -> ClusterProfile:
    try:
        return load_checked_profile(text, origin)
    except ValueError as err:  # one line naming each bad field, as `ftbench validate --profile` prints it
        raise ProfileError(str(err)) from err


class ProfileSource:
    """Holds the current profile; `current()` applies server-detected features where unset."""

    def __init__(self, file: Path | None = None, config_map_key: str = "profile.yaml") -> None:
        self.file = file
        self.key = config_map_key
        self._profile = ClusterProfile()
        self._file_mtime: float | None = None
        self._server_minor: int | None = None
        self._training_operator = False
        self._training_runtimes: frozenset[str] | None = None
        self.origin = "defaults"
        self.error: str | None = None

    def set_server_features(
        self, minor: int | None, *, training_operator: bool, training_runtimes: frozenset[str] | None = None
    ) -> None:
        """What the server has. training_runtimes: ClusterTrainingRuntime names, None without Trainer v2."""
        self._server_minor = minor
        self._training_operator = training_operator
        self._training_runtimes = training_runtimes

    def server_features(self, profile: ClusterProfile) -> Features | None:
        if self._server_minor is None:
            return None
        runtimes = self._training_runtimes
        return Features.for_kubernetes(
            self._server_minor,
            training_operator=self._training_operator,
            trainer_v2=runtimes is not None and profile.train_job.runtime_name in runtimes,
        )

    def current(self) -> ClusterProfile:
        self._refresh_file()
        profile = self._profile
        features = self.server_features(profile)
        if features is not None and "features" not in profile.model_fields_set:
            profile = profile.model_copy(update={"features": features})
        return profile

    def update_from_config_map(self, body: Mapping[str, Any]) -> bool:
        """Take the profile from a ConfigMap body (or go back to defaults if it lost the key)."""
        text = ((body.get("data") or {}).get(self.key)) or ""
        meta = body.get("metadata") or {}
        return self._set(text, f"configmap {meta.get('namespace', '?')}/{meta.get('name', '?')}")

    def reset(self) -> None:
        self._profile, self.origin, self.error = ClusterProfile(), "defaults", None

    def _refresh_file(self) -> None:
        if self.file is None:
            return
        try:
            mtime = self.file.stat().st_mtime
        except OSError as err:
            self.error = f"{self.file}: {err}"
            return
        if mtime != self._file_mtime:
            self._file_mtime = mtime
            self._set(self.file.read_text(), str(self.file))

    def _set(self, text: str, origin: str) -> bool:
        try:
            profile = parse_profile(text, origin)
        except ProfileError as err:
            self.error = f"{origin}: {err}"
            log.error("ignoring invalid cluster profile from %s (keeping %s): %s", origin, self.origin, err)
            return False
        self._profile, self.origin, self.error = profile, origin, None
        log.info("cluster profile loaded from %s", origin)
        return True
