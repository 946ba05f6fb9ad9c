"""What to build, under which names, and the content key that decides whether to build again.

An image is current when its ``io.ftbench.cache-key`` label equals the key computed here from
everything the build reads: the Dockerfile, the build arguments (whose base image is named by its
own key, so a new base rebuilds what stands on it) and every file the Dockerfile copies. The
names are the ones a cluster would pull: the trainer tags come from the cluster profile's
``images`` (``Images.image_for``), the operator's from the Helm chart, so a pod the operator
renders names an image the local kubelet finds in buildah's storage.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ftbench.api.profile import Images
from ftbench.contracts import images as C
from ftbench.contracts.enums import Engine
from ftbench.engines.releases import load_releases, version_tuple

REPO = Path(__file__).resolve().parents[2]
# Local bases: the Dockerfiles' PYTHON_IMAGE / BASE_IMAGE where python:3.11-slim and
# pytorch/pytorch cannot be pulled. "localhost/" keeps them apart from anything a registry serves.
PYTHON_BASE = "localhost/ftbench/python:3.11-bookworm"
DEBIAN_SUITE = "bookworm"
# python-is-python3: the Dockerfiles call `python`, as the official images provide it.
DEBIAN_PACKAGES = ("python3.11", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates")
# What the official python image's config sets (PATH, LANG), and pip's settings for Debian's
# "externally managed" Python: images install into the system Python, as the official ones do.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "PIP_NO_CACHE_DIR": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1"}
# The fms-acceleration plugins and Liger are CUDA kernels (triton, auto-gptq): not built for CPU images.
CPU_BUILD_ARGS = {C.ARG_FLASH_ATTN: "false", C.ARG_FMS_ACCELERATION: "false", C.ARG_LIGER_KERNEL: "false"}
_SKIP_PARTS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def torch_base() -> str:
    """The CPU torch base: the Python base plus the machine's CPU torch wheel (cpuTorch)."""
    return f"localhost/ftbench/torch:{load_releases().cpu_torch}-cpu"


def operator_image() -> str:
    """The chart's operator image: values.yaml's repository, the chart's appVersion as tag."""
    chart = yaml.safe_load((REPO / "helm" / "ftbench" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "helm" / "ftbench" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def trainer_image(engine: Engine, fms_version: str = "") -> str:
    """What the default cluster profile turns an experiment of ``engine`` (and release) into."""
    return Images().image_for(engine, fms_version or load_releases().default)


def ci_releases() -> tuple[str, ...]:
    """The fms-hf-tuning releases CI builds images for: the API's default and the newest.

    Every installable release trains in CI already (tests/trainer/test_fms_releases.py, in the
    per-release environments); an image per release would cost a full root file system copy each
    (vfs) and minutes of pip. The two ends of the range cover both seed torch lines and both
    Dockerfile paths; ``--all`` builds the rest.
    """
    releases = load_releases()
    newest = max((r.version for r in releases.installable), key=version_tuple)
    return tuple(dict.fromkeys((releases.default, newest)))


@dataclass(frozen=True)
class ImageBuild:
    """One Dockerfile build: the image name, the Dockerfile, its build arguments and content key."""

    ref: str
    dockerfile: str
    args: dict[str, str] = field(default_factory=dict)
    key: str = ""

    def bud_args(self) -> list[str]:
        """`buildah bud` arguments after the global options (the context is the repository)."""
        out = ["bud", "--isolation", "chroot", "--layers=false", "-f", self.dockerfile, "-t", self.ref]
        for name, value in sorted(self.args.items()):
            out += ["--build-arg", f"{name}={value}"]
        out += ["--label", f"{C.CACHE_KEY_LABEL}={self.key}"]
        return [*out, str(REPO)]


def copy_sources(dockerfile_text: str) -> list[str]:
    """Context paths the Dockerfile's ``COPY`` instructions read (not ``COPY --from`` a stage)."""
    sources: list[str] = []
    for line in dockerfile_text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        flags = [w for w in words[1:] if w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def _files(paths: Iterable[str]) -> Iterator[Path]:
    for rel in paths:
        path = REPO / rel
        if path.is_file():
            yield path
            continue
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_PARTS)
            for name in sorted(names):
                if not name.endswith(".pyc"):
                    yield Path(root) / name


def content_key(dockerfile: str, args: dict[str, str], parents: dict[str, str]) -> str:
    """sha256 of the Dockerfile, the arguments (a local base by its key) and the copied files."""
    h = hashlib.sha256()
    text = (REPO / dockerfile).read_text()
    h.update(text.encode())
    for name, value in sorted(args.items()):
        h.update(f"\0{name}={parents.get(value, value)}".encode())
    for path in _files(copy_sources(text)):
        h.update(b"\0" + str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:32]


def builds(base_keys: dict[str, str], *, releases: Iterable[str] | None = None) -> list[ImageBuild]:
    """The operator image, the trl trainer and one fms-hf-tuning trainer per release (CI's set
    unless ``releases``), each keyed on top of ``base_keys`` (local base name -> its key)."""
    wanted: list[ImageBuild] = [
        ImageBuild(operator_image(), "Dockerfile.operator", {C.ARG_PYTHON_IMAGE: PYTHON_BASE}),
        ImageBuild(
            trainer_image(Engine.TRL),
            "Dockerfile.trainer",
            {C.ARG_BASE_IMAGE: torch_base(), C.ARG_ENGINE: "trl", **CPU_BUILD_ARGS},
        ),
    ]
    for version in ci_releases() if releases is None else releases:
        args = {C.ARG_BASE_IMAGE: torch_base(), C.ARG_ENGINE: "fms-hf-tuning", C.ARG_FMS_VERSION: version}
        wanted.append(
            ImageBuild(trainer_image(Engine.FMS_HF_TUNING, version), "Dockerfile.trainer", {**args, **CPU_BUILD_ARGS})
        )
    return [ImageBuild(b.ref, b.dockerfile, b.args, content_key(b.dockerfile, b.args, base_keys)) for b in wanted]
