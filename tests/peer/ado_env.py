"""A throwaway environment holding the published ado-sfttrainer package, for the peer tests.

Built once with uv under ``~/.cache/ftbench/peer/<name>-<key>`` (the key hashes the requirements),
idempotently: a finished environment has a ``.complete`` marker, a half-built one is removed and
rebuilt. The packages are installed ``--no-deps``: their dependencies (ray, aim, ...) are heavy and
the tests only read ado-sfttrainer's data files, run its dataset generator scripts (typer; the
vision one also pandas, pyarrow and pillow), import its token-counting function (which needs
transformers, taken from the test environment) and run its entity validation
(``experiments/common.py``), which imports ``ado.schema`` from ado-core. ``ado.schema`` itself needs
only pydantic, numpy and pyyaml (rich, which it imports lazily for rendering, comes with typer).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from ftbench.contracts.env import cache_root

ADO_PACKAGE = "ado-sfttrainer==1.8.12"
# The ado-core release whose `ado.schema` ado-sfttrainer 1.8.12's experiment modules import.
ADO_CORE = "ado-core==2.3.0"
# What the used scripts/modules import beyond the standard library: generate_dataset.py needs
# typer; generate_vision_dataset.py typer, pandas + pyarrow for to_parquet and pillow for the image;
# ado.schema and experiments/common.py pydantic, numpy, pyyaml (ado-core's own bounds).
EXTRA_REQUIREMENTS = ("typer", "pandas", "pyarrow", "pillow", "pydantic>=2.10", "numpy>=1.26.4", "pyyaml>=6.0.2")


def _cache_root() -> Path:
    return cache_root() / "peer"


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        raise RuntimeError("uv is needed to build the ado peer environment (it is installed in .venv)")
    return found


def env_dir() -> Path:
    key = hashlib.sha256("\n".join([ADO_PACKAGE, ADO_CORE, *EXTRA_REQUIREMENTS, sys.version]).encode()).hexdigest()[:12]
    return _cache_root() / f"ado-sfttrainer-{key}"


def ensure_ado_env() -> Path:
    """The environment's directory, built on first use (under a lock: test workers share the cache)."""
    target = env_dir()
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            _build(target)
    return target


def _build(target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(target)], check=True)
    python = str(target / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "--python", python, "--no-deps", ADO_PACKAGE, ADO_CORE], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", python, *EXTRA_REQUIREMENTS], check=True)
    (target / ".complete").write_text(f"{ADO_PACKAGE}\n{ADO_CORE}\n")


def ado_python(env: Path) -> Path:
    return env / "bin" / "python"


def ado_package_dir(env: Path) -> Path:
    """``ado_actuators/sfttrainer`` inside the environment."""
    (found,) = env.glob("lib/python*/site-packages/ado_actuators/sfttrainer")
    return found
