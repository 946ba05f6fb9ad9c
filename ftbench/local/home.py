"""Where local runs keep models, datasets, run directories and the results store.

`FTBENCH_HOME` (default ~/.ftbench) so tests and CI can point everything at a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from ftbench.api.profile import ClusterProfile, Storage
from ftbench.contracts import env as E


def ftbench_home() -> Path:
    return Path(os.environ.get(E.FTBENCH_HOME) or Path.home() / ".ftbench").expanduser()


def results_db(home: Path | None = None) -> Path:
    """The results store's file under `home` (default FTBENCH_HOME): named once for every command that
    records runs into it or reads them back."""
    return (home or ftbench_home()) / "results.db"


def local_profile(base: ClusterProfile | None = None, home: Path | None = None) -> ClusterProfile:
    """The cluster profile with storage moved under FTBENCH_HOME (models/, data/, hf/).

    A model or data path the user set in their own profile is kept; only the cluster defaults
    (PVC mount points that do not exist on a laptop) are replaced.
    """
    home = home or ftbench_home()
    base = base or ClusterProfile()
    defaults = Storage()
    storage = base.storage
    updates = {}
    if storage.model_root == defaults.model_root:
        updates["model_root"] = str(home / "models")
    if storage.data_dir == defaults.data_dir:
        updates["data_dir"] = str(home / "data")
    if storage.hf_home == defaults.hf_home:
        updates["hf_home"] = os.environ.get(E.HF_HOME) or str(home / "hf")
    return base.model_copy(update={"storage": storage.model_copy(update=updates)})
