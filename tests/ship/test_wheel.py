"""What `pip install ftbench` installs: the product, and not the test rig (issue 29.1).

Both wheels are built from a copy of this checkout's sources (setuptools writes build/ where it
builds) with the environment's own setuptools (`pip wheel --no-build-isolation --no-deps`, nothing
downloaded), and read as the zip files they are.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


SOURCES = ("pyproject.toml", "README.md", "ftbench", "operator", "trainer-image", "devcluster")
SKIP = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")


def _copy(tmp: Path) -> Path:
    root = tmp / "src"
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=SKIP)
        else:
            root.mkdir(exist_ok=True)
            shutil.copy2(source, root / name)
    return root


def _wheel(source: Path, out: Path) -> set[str]:
    out.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(out), str(source)],
        check=True, cwd=out,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _packages(names: set[str]) -> set[str]:
    return {n.split("/")[0] for n in names if n.endswith(".py")}


def test_the_ftbench_wheel_holds_the_product_and_no_test_rig(tmp_path: Path) -> None:
    names = _wheel(_copy(tmp_path), tmp_path / "out")
    assert _packages(names) == {"ftbench", "ftbench_operator", "ftbench_trainer"}
    assert not [n for n in names if "devcluster" in n or "kubelet" in n]
    # the data the product reads at run time ships with it
    assert "ftbench/catalog/data/models.yaml" in names and "ftbench/engines/data/fms-releases.yaml" in names


def test_the_test_rig_is_its_own_wheel(tmp_path: Path) -> None:
    names = _wheel(_copy(tmp_path) / "devcluster", tmp_path / "out")
    assert _packages(names) == {"ftbench_devcluster"}
    assert {"ftbench_devcluster/kubelet/runner.py", "ftbench_devcluster/control_plane.py"} <= names
