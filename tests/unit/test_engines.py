"""The fms-hf-tuning release catalog, its generated files and the environment cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftbench.cli import main
from ftbench.engines import flags, locks
from ftbench.engines.envs import MARKER, list_envs, prune
from ftbench.engines.releases import (
    DEFAULT_FMS_HF_TUNING_VERSION,
    FMS_HF_TUNING_VERSIONS,
    load_releases,
    parse_lock,
    version_tuple,
)

RELEASES = load_releases()


def test_the_catalog_is_the_api() -> None:
    assert RELEASES.versions == FMS_HF_TUNING_VERSIONS
    assert DEFAULT_FMS_HF_TUNING_VERSION == "2.1.2" == RELEASES.default  # the seed's default
    assert RELEASES.get(RELEASES.default).installable
    assert list(RELEASES.versions) == sorted(RELEASES.versions, key=version_tuple, reverse=True)
    assert "3.2.2" in RELEASES.versions  # the current release is offered too


def test_every_release_is_complete() -> None:
    from ftbench_trainer.engines.fms_api import PARSE_RETURNS

    for r in RELEASES.releases:
        assert r.api in PARSE_RETURNS
        assert r.seed_torch in RELEASES.base_images
        if r.installable:
            assert r.released is not None and r.stack()["fms-hf-tuning"] == r.version
            assert flags.known_flags(r.version), f"{r.version} has no flags in fms-flags.yaml"
        else:
            assert r.reason and not flags.known_flags(r.version)


def test_parse_lock_normalises_names() -> None:
    assert parse_lock("# c\nPyYAML==6.0.2\nnvidia_ml_py==12.5\n  # via x\n") == {
        "pyyaml": "6.0.2",
        "nvidia-ml-py": "12.5",
    }


def test_engines_list_and_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("FTBENCH_CACHE", str(tmp_path))
    stale = tmp_path / "engines" / "fms-hf-tuning-2.1.2-py3.11-000000000000"
    stale.mkdir(parents=True)
    (stale / MARKER).write_text("{}")
    [env] = list_envs()
    assert (env.release, env.ready, env.current) == ("2.1.2", True, False)
    assert main(["engines", "list"]) == 0 and "stale" in capsys.readouterr().out
    assert prune() == [stale] and not stale.exists()
    assert main(["engines", "build", "9.9.9"]) == 2
    assert "not offered" in capsys.readouterr().err


@pytest.mark.fms
def test_locks_are_fresh() -> None:
    """Every lock recompiles to itself: all cut-off dates are fixed (needs PyPI and uv). fms-flags.yaml is
    checked against each release's parser by tests/unit/test_render_fms_args.py."""
    assert locks.main(["--check"]) == 0
