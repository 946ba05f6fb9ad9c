"""Each command that needs an optional extra, run in a real environment that has only ftbench's core
dependencies (`pip install ftbench`: pydantic and pyyaml), says which extra to install, with no
traceback; the core commands work there.

The environment is a venv without system site-packages whose site-packages links only pydantic,
pyyaml and what they require, from this interpreter's installation (no download): matplotlib,
kubernetes, kopf, torch, trl and uv are truly absent there, not hidden.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from ftbench.extras import install_hint

REPO = Path(__file__).resolve().parents[2]
CORE = ("pydantic", "pyyaml")


def _requirements(name: str) -> set[str]:
    """`name` and, recursively, what it requires outside any extra."""
    found, todo = set[str](), [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in found:
            continue
        found.add(dist.metadata["Name"].lower())
        for req in dist.requires or []:
            if "extra ==" not in req and (m := re.match(r"[A-Za-z0-9_.-]+", req)):
                todo.append(m.group(0))
    return found


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("core-env")
    venv.create(root, with_pip=False, symlinks=True)
    [site] = (root / "lib").glob("python3.*/site-packages")
    for name in set().union(*(_requirements(n) for n in CORE)):
        dist = importlib.metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = Path(str(dist.locate_file(top)))
            if top != ".." and not top.endswith(".pth") and not (site / top).exists():
                (site / top).symlink_to(source)
    # What `pip install ftbench` installs: the three packages of the distribution (pyproject.toml).
    (site / "ftbench-source.pth").write_text("".join(f"{REPO / d}\n" for d in (".", "operator", "trainer-image")))
    return root / "bin" / "python"


def ftbench(python: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"FTBENCH_HOME": str(home), "FTBENCH_CACHE": str(home / "cache"), "KUBECONFIG": str(home / "absent"),
            "PATH": "/usr/bin:/bin"}  # fmt: skip
    return subprocess.run([str(python), "-m", "ftbench", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)  # fmt: skip


def test_the_environment_lacks_the_extras(core_python: Path) -> None:
    probe = "import importlib.util as u; print([m for m in ('matplotlib', 'kubernetes', 'kopf', 'torch', 'trl') if u.find_spec(m)])"
    out = subprocess.run([str(core_python), "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("report", "-o", "{tmp}/report"), "report"),
        (("results", "--export", "csv", "--from-cluster"), "operator"),
        (("results", "--from-cluster"), "operator"),
        (("run", "examples/quickstart.yaml"), "trainer"),
        (("sweep", "examples/sweep.yaml"), "trainer"),
        (("run", "{tmp}/fms.yaml"), "trainer"),
        (("engines", "build", "3.1.0"), "trainer"),
        (("dev", "up"), "operator"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_a_command_without_its_extra_names_it(core_python: Path, tmp_path: Path, args: tuple[str, ...],
                                              extra: str) -> None:  # fmt: skip
    quickstart = (REPO / "examples" / "quickstart.yaml").read_text()
    (tmp_path / "fms.yaml").write_text(quickstart.replace("engine: trl", "engine: fms-hf-tuning"))
    done = ftbench(core_python, tmp_path / "home", *(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert install_hint(extra) in done.stderr, done.stderr


def test_ftbench_dev_without_the_test_rig_says_how_to_install_it(core_python: Path, tmp_path: Path) -> None:
    """Issue 29.1: the rig (devcluster/) is not in `pip install ftbench`, and is truly absent here."""
    done = ftbench(core_python, tmp_path / "home", "dev", "status")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "pip install -e ./devcluster" in done.stderr, done.stderr


def test_the_core_commands_need_no_extra(core_python: Path, tmp_path: Path) -> None:
    for args in (("validate", "examples/quickstart.yaml"), ("render", "examples/lora.yaml"), ("catalog", "engines"),
                 ("results",), ("crd", "-o", str(tmp_path / "crds")), ("engines", "list"),
                 ("dataset", "generate", "news-chars-512-entries-4096", "-o", str(tmp_path / "data"))):  # fmt: skip
        done = ftbench(core_python, tmp_path / "home", *args)
        assert done.returncode == 0, (args, done.stderr)
