"""ftbench/engines/data/modules.yaml is what the stacks build: the rules `engine.target-modules` and
`engine.layer-class` read it, so a stale table refuses a right name or passes a wrong one.

Fresh when it lists every catalog architecture, each release's entry names the transformers its lock
pins, and the trl stack's entries are what this environment builds now (probed again for a dense, an
MoE and a hybrid model; `python -m ftbench.engines.modules --write` regenerates it all).
"""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")

from ftbench.catalog import load_catalog
from ftbench.engines.locks import lock_path
from ftbench.engines.modules import architectures, load_modules, probe
from ftbench.engines.releases import TRL_STACK, load_releases, parse_lock

REGENERATE = "python -m ftbench.engines.modules --write"


def test_every_architecture_and_release_is_in_the_table() -> None:
    table = load_modules()
    wanted = set(architectures(load_catalog()))
    for version, models in table["transformers"].items():
        assert set(models) == wanted, (version, REGENERATE)
    for release in load_releases().installable:
        assert table["stacks"][release.version] == parse_lock(lock_path(release).read_text())["transformers"], (
            REGENERATE
        )


def test_the_trl_stack_builds_what_the_table_says() -> None:
    models = {k: v for k, v in architectures(load_catalog()).items() if k in ("llama3.2-1b", "mixtral-8x7b-instruct-v0.1", "granite-4.0-h-tiny")}  # fmt: skip
    probed = probe(sys.executable, models)
    table = load_modules()
    assert table["stacks"][TRL_STACK] == probed["transformers"], REGENERATE
    assert {k: table["transformers"][probed["transformers"]][k] for k in models} == probed["models"], REGENERATE
