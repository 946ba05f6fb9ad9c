"""A throwaway environment holding the published ado-sfttrainer package, for the peer tests.

Built once with uv under ``~/.cache/ftbench/peer/<name>-<key>`` (the key hashes the requirements),
idempotently: a finished environment has a ``.complete`` marker, a half-built one is removed and
rebuilt. The package is installed ``--no-deps``: its dependencies (ray, ado-core, aim, ...) are
heavy and the tests only read its data files, run its dataset generator script (typer) and import
its token-counting function (which needs transformers, taken from the test environment).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from ftbench.contracts.env import cache_root

ADO_PACKAGE = "ado-sfttrainer==1.8.12"
# What the used scripts/modules import beyond the standard library (generate_dataset.py: typer).
EXTRA_REQUIREMENTS = ("typer",)


def _cache_root() -> Path:
    return cache_root() / "peer"


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        raise RuntimeError("uv is needed to build the ado peer environment (it is installed in .venv)")
    return found


def env_dir() -> Path:
    key = hashlib.sha256("\n".join([ADO_PACKAGE, *EXTRA_REQUIREMENTS, sys.version]).encode()).hexdigest()[:12]
    return _cache_root() / f"ado-sfttrainer-{key}"


def ensure_ado_env() -> Path:
    """The environment's directory, built on first use."""
    target = env_dir()
    if (target / ".complete").is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(target)], check=True)
    python = str(target / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "--python", python, "--no-deps", ADO_PACKAGE], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", python, *EXTRA_REQUIREMENTS], check=True)
    (target / ".complete").write_text(ADO_PACKAGE + "\n")
    return target


def ado_python(env: Path) -> Path:
    return env / "bin" / "python"


def ado_package_dir(env: Path) -> Path:
    """``ado_actuators/sfttrainer`` inside the environment."""
    (found,) = env.glob("lib/python*/site-packages/ado_actuators/sfttrainer")
    return found
