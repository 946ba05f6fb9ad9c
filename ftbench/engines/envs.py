"""Local environments, one per fms-hf-tuning release, built from its lock and cached by content.

Each release pins a stack (transformers, trl, peft, …) that excludes current trl and the others
(docs/engines.md), so every release gets its own virtual environment under
`$FTBENCH_CACHE/engines` (default `~/.cache/ftbench/engines`), named by the release and a hash of
what goes into it (lock, torch, Python). `ftbench run`, `ftbench engines`, hack/setup-envs.sh and
the tests all call `ensure_env`, so they build and reuse the same environments. ftbench's own
packages are not installed there: the trainer runs with `package_path()` on PYTHONPATH, so an
environment stays valid while ftbench's code changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ftbench.contracts.env import cache_root as ftbench_cache
from ftbench.engines.locks import uv_command
from ftbench.engines.releases import FmsRelease, load_releases

BUILDER_VERSION = "1"  # bump when the recipe below changes: every environment is rebuilt
MARKER = ".ftbench-env.json"
Log = Callable[[str], None]


def cache_root() -> Path:
    return ftbench_cache() / "engines"


@cache
def _python_tag(python: str) -> str:
    """'3.11' for an interpreter (asked once per interpreter: env_dir runs for every release; this one's own is
    known without a process)."""
    if python == sys.executable:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def env_key(release: FmsRelease, python_tag: str) -> str:
    releases = load_releases()
    h = hashlib.sha256()
    for part in (BUILDER_VERSION, release.lock_text(), releases.cpu_torch, python_tag, *releases.excluded):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class EngineEnv:
    release: str
    path: Path
    ready: bool
    current: bool

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def env_dir(release: FmsRelease, python: str | None = None) -> Path:
    tag = _python_tag(python or sys.executable)
    return cache_root() / f"fms-hf-tuning-{release.version}-py{tag}-{env_key(release, tag)}"


def _find_links() -> list[str]:
    """pip's configured local wheel folders (the machine's CPU torch lies in one), for uv too."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    return [arg for link in links for arg in ("--find-links", link)]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per environment at a time (parallel tests, two `ftbench run`s)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_env(version: str, *, python: str | None = None, log: Log = lambda _: None) -> Path:
    """The interpreter of the environment for fms-hf-tuning `version`, built on first use."""
    releases = load_releases()
    release = releases.get(version)
    if not release.installable:
        raise RuntimeError(f"fms-hf-tuning {version} cannot be installed: {release.reason}")
    base = python or sys.executable
    path = env_dir(release, base)
    marker = path / MARKER
    if marker.is_file():
        return path / "bin" / "python"
    with _locked(path):
        if marker.is_file():
            return path / "bin" / "python"
        log(f"building the fms-hf-tuning {version} environment in {path} (first use; cached afterwards)")
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        uv = uv_command()
        subprocess.run([*uv, "venv", "--quiet", "--python", base, str(path)], check=True)
        with tempfile.TemporaryDirectory() as tmp:
            lock, overrides, excludes = (Path(tmp, n) for n in ("lock.txt", "overrides.txt", "excludes.txt"))
            lock.write_text(release.lock_text())
            overrides.write_text(f"torch=={releases.cpu_torch}\n")
            excludes.write_text("\n".join(n for n in releases.excluded if n != "torch") + "\n")
            cmd = [*uv, "pip", "install", "--quiet", "--python", str(path / "bin" / "python"), "-r", str(lock)]
            cmd += [f"torch=={releases.cpu_torch}", "--overrides", str(overrides), "--excludes", str(excludes)]
            proc = subprocess.run([*cmd, *_find_links()], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            raise RuntimeError(f"installing fms-hf-tuning {version} failed:\n{proc.stderr[-3000:]}")
        info: dict[str, object] = {
            "release": version,
            "lockSha256": hashlib.sha256(release.lock_text().encode()).hexdigest(),
        }
        info |= {"torch": releases.cpu_torch, "builtSeconds": round(time.monotonic() - started, 1)}
        marker.write_text(json.dumps(info, indent=2) + "\n")
        log(f"fms-hf-tuning {version} environment ready in {info['builtSeconds']} s")
    return path / "bin" / "python"


def list_envs(python: str | None = None) -> list[EngineEnv]:
    """Every environment in the cache; `current` ones match today's lock, torch and Python."""
    root = cache_root()
    current = {env_dir(r, python).name for r in load_releases().installable}
    out = []
    for path in sorted(root.glob("fms-hf-tuning-*")) if root.is_dir() else []:
        if path.is_dir():
            release = path.name.removeprefix("fms-hf-tuning-").split("-py")[0]
            out.append(EngineEnv(release, path, (path / MARKER).is_file(), path.name in current))
    return out


def prune(*, everything: bool = False, python: str | None = None) -> list[Path]:
    """Remove stale environments (or all of them); returns what was removed."""
    removed = []
    for env in list_envs(python):
        if everything or not env.current or not env.ready:
            shutil.rmtree(env.path, ignore_errors=True)
            removed.append(env.path)
    return removed


def package_path() -> str:
    """A PYTHONPATH that holds exactly ftbench and ftbench_trainer (whatever else sits beside them).

    In a checkout they live in different folders; installed, they share site-packages with this
    environment's own stack, which must not leak into the release's environment. So link the two
    packages into a folder of their own.
    """
    pkgs = []
    for name in ("ftbench", "ftbench_trainer"):  # located, not imported: ftbench never imports the trainer
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{name} is not importable here: pip install 'ftbench[trainer]'")
        pkgs.append(Path(spec.origin).parent)
    digest = hashlib.sha256("\0".join(map(str, pkgs)).encode()).hexdigest()[:12]
    shim = cache_root() / "pkgs" / digest
    shim.mkdir(parents=True, exist_ok=True)
    for pkg in pkgs:
        link = shim / pkg.name
        if not link.is_symlink():
            with contextlib.suppress(FileExistsError):
                link.symlink_to(pkg, target_is_directory=True)
    return str(shim)
