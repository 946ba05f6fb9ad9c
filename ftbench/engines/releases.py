"""The fms-hf-tuning releases ftbench offers, read from `data/fms-releases.yaml` (the one source).

The API enum, the validation rules, the environment builder, the trainer's API adapter, the
image build and `ftbench catalog engines` all read this module, so adding a release is one YAML
entry plus its generated lock file (docs/engines.md says how).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import date
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from ftbench.catalog import yaml_data
from ftbench.contracts.wire import WireModel
from ftbench.host.files import sync_generated

# The API classes of `tuning.sft_trainer`: the release where `parse_arguments`/`train` changed shape.
ApiClass = Literal["2.0", "2.3", "2.4", "2.5", "3.0", "3.1"]
Method = Literal["full", "lora", "gptq-lora", "pt"]
DATA = files("ftbench.engines").joinpath("data")
# accelerate's first release with FSDP2 (`FullyShardedDataParallelPlugin(fsdp_version=2)`).
FSDP2_ACCELERATE = (1, 6)
# accelerate 1.6 raises "FSDP2 only supports SHARDED_STATE_DICT for now" for any other state dict type
# (fms-hf-tuning 3.0.0's lock); 1.11 and newer take FULL_STATE_DICT with FSDP2 too.
FSDP2_FULL_STATE_DICT_ACCELERATE = (1, 7)


def version_tuple(version: str) -> tuple[int, ...]:
    """'3.0.0.1' -> (3, 0, 0, 1); orders releases and gates flags on them."""
    return tuple(int(part) for part in version.split("."))


class FmsRelease(WireModel):
    """One release: how to install it, which API shape it has, and what it cannot do."""

    version: Annotated[str, Field(pattern=r"^\d+(\.\d+){2,3}$")]
    released: date | None = Field(None, description="Publication date on PyPI: the lock's cut-off.")
    installable: bool = True
    reason: str = Field("", description="Why the release cannot be installed (installable false).")
    api: ApiClass
    seed_torch: str = Field(description="The torch seed 001 ties the release to (its image's base).")
    defects: dict[Method, str] = Field(
        default_factory=dict, description="Methods this release cannot run, with the reason (validation refuses them)."
    )

    @property
    def lock_name(self) -> str:
        return f"fms-hf-tuning-{self.version}.txt"

    def lock_text(self) -> str:
        """The pinned requirements (no torch) this release's environments and images install."""
        if not self.installable:
            raise ValueError(f"fms-hf-tuning {self.version} cannot be installed: {self.reason}")
        return DATA.joinpath("locks", self.lock_name).read_text()

    def stack(self) -> dict[str, str]:
        """Package -> pinned version, from the lock."""
        return parse_lock(self.lock_text())

    @property
    def fsdp_versions(self) -> tuple[int, ...]:
        """The FSDP implementations this release's accelerate offers: FSDP1 always, FSDP2 (fully_shard,
        accelerate's `fsdp_version: 2`) from accelerate 1.6 on. Read from the lock, so it is a fact of
        the release's stack, not a claim; () for a release that cannot be installed."""
        if not self.installable:
            return ()
        accelerate = self.stack().get("accelerate", "0")
        return (1, 2) if version_tuple(accelerate.split("+")[0])[:2] >= FSDP2_ACCELERATE else (1,)

    @property
    def fsdp2_full_state_dict(self) -> bool:
        """Whether this release's accelerate runs FSDP2 with FULL_STATE_DICT (else SHARDED_STATE_DICT only)."""
        accelerate = self.stack().get("accelerate", "0") if self.installable else "0"
        return version_tuple(accelerate.split("+")[0])[:2] >= FSDP2_FULL_STATE_DICT_ACCELERATE


class FmsReleases(WireModel):
    cpu_torch: str
    locked_at: date
    ftbench_layer: tuple[str, ...]
    excluded: dict[str, str]
    default: str
    base_images: dict[str, str] = Field(description="seedTorch -> Dockerfile.trainer BASE_IMAGE.")
    releases: tuple[FmsRelease, ...]

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(r.version for r in self.releases)

    @property
    def installable(self) -> tuple[FmsRelease, ...]:
        return tuple(r for r in self.releases if r.installable)

    def get(self, version: str) -> FmsRelease:
        for r in self.releases:
            if r.version == version:
                return r
        raise KeyError(f"fms-hf-tuning {version} is not offered; offered: {', '.join(self.versions)}")

    def newest_per_api(self, method: Method) -> tuple[FmsRelease, ...]:
        """Per API class, the newest installable release that can run `method` (the release matrix
        runs full fine-tuning and prompt tuning on these; LoRA on every release)."""
        seen: dict[str, FmsRelease] = {}
        for r in sorted(self.installable, key=lambda r: version_tuple(r.version), reverse=True):
            if method not in r.defects:
                seen.setdefault(r.api, r)
        return tuple(seen.values())

    def matrix(self) -> dict[str, tuple[Method, ...]]:
        """What the release matrix in CI trains on each installable release (tests/trainer/test_fms_releases.py
        runs exactly this; the catalog table and the releases reference show it)."""
        out: dict[str, list[Method]] = {r.version: ["lora"] for r in self.installable}
        for method in ("full", "pt"):
            for r in self.newest_per_api(method):
                out[r.version].append(method)
        return {v: tuple(ms) for v, ms in out.items()}


_LOCK_LINE = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def parse_lock(text: str) -> dict[str, str]:
    """`name==version` lines of a lock file, names normalised (PEP 503)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LOCK_LINE.match(line.strip())
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return out


@cache
def load_releases() -> FmsReleases:
    return FmsReleases.model_validate(yaml_data.load(DATA.joinpath("fms-releases.yaml").read_text()))


# The fms-hf-tuning releases offered, newest first (the API's enum); 2.1.2 is the seed's default.
FMS_HF_TUNING_VERSIONS: tuple[str, ...] = load_releases().versions
DEFAULT_FMS_HF_TUNING_VERSION = load_releases().default

# The engine stacks the generated tables are keyed by: "trl" (this environment, which the trl image
# mirrors) or an fms-hf-tuning release's version (its environment and image).
TRL_STACK = "trl"


def stack_of(engine: str, fms_hf_tuning_version: str) -> str:
    """The stack a run of `engine` trains on (the release only matters for fms-hf-tuning)."""
    return TRL_STACK if engine == TRL_STACK else fms_hf_tuning_version


def stack_label(stack: str) -> str:
    """A stack as a refusal names it: "engine trl" or "fms-hf-tuning 3.1.0"."""
    return "engine trl" if stack == TRL_STACK else f"fms-hf-tuning {stack}"


def table_main(
    module: str, doc: str | None, data_file: str, generate: Callable[[], str], argv: list[str] | None
) -> int:
    """The command line of a table generated into data/ from every stack (`python -m <module> --write`
    regenerates it; `--check`, the default, exits 1 when it is stale)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n")[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if data/{data_file} is stale")
    parser.add_argument("--write", action="store_true", help=f"regenerate data/{data_file}")
    args = parser.parse_args(argv)
    path = Path(str(DATA.joinpath(data_file)))
    return sync_generated({path: generate()}, check=not args.write, regenerate=f"python -m {module} --write")
