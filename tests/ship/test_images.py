"""Dockerfile.operator and Dockerfile.trainer agree with the package they install, and
docs/images.md names the tags the cluster profile resolves experiments to."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from ftbench.api.profile import Images
from ftbench.contracts.enums import Engine
from ftbench.engines.releases import DEFAULT_FMS_HF_TUNING_VERSION

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DOCKERFILES = ("Dockerfile.operator", "Dockerfile.trainer")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(name: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / name).read_text())
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, args = stripped.partition(" ")
            found.append(Instruction(keyword.upper(), args.strip()))
    return found


def build_args(name: str) -> dict[str, str]:
    pairs = (i.args.partition("=") for i in instructions(name) if i.keyword == "ARG")
    return {key: value for key, _, value in pairs}


@pytest.mark.parametrize("name", DOCKERFILES)
def test_copied_paths_exist(name: str) -> None:
    for instruction in instructions(name):
        if instruction.keyword != "COPY" or "--from=" in instruction.args:
            continue
        *sources, _dest = shlex.split(instruction.args)
        for source in sources:
            assert (REPO / source).exists(), f"{name}: COPY {source} does not exist"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_extras_named_exist(name: str) -> None:
    text = (REPO / name).read_text()
    extras = set(re.findall(r"[.)]\[([a-z,-]+)\]", text))
    assert extras, f"{name} installs no extra"
    declared = set(PYPROJECT["project"]["optional-dependencies"])
    for group in extras:
        assert set(group.split(",")) <= declared, f"{name}: extra [{group}] not in pyproject"


def entrypoint(name: str) -> list[str]:
    (found,) = [i for i in instructions(name) if i.keyword == "ENTRYPOINT"]
    return json.loads(found.args)


def test_trainer_entrypoint_is_a_console_script() -> None:
    command = entrypoint("Dockerfile.trainer")[0]
    scripts = PYPROJECT["project"]["scripts"]
    assert command in scripts
    module, _, function = scripts[command].partition(":")
    path = REPO / "trainer-image" / Path(*module.split("."))
    assert path.with_suffix(".py").is_file(), f"{scripts[command]}: module missing"
    assert re.search(rf"^def {function}\(", path.with_suffix(".py").read_text(), re.M), "entry function missing"


def test_operator_runs_kopf_from_the_operator_extra() -> None:
    command = entrypoint("Dockerfile.operator")
    assert command[:2] == ["kopf", "run"]
    assert "--standalone" in command
    assert "--liveness=http://0.0.0.0:8080/healthz" in command
    assert any(dep.startswith("kopf") for dep in PYPROJECT["project"]["optional-dependencies"]["operator"])
    module = command[command.index("-m") + 1]
    package = module.split(".")[0]
    assert (REPO / "operator" / package / "__init__.py").is_file()
    app = REPO / "operator" / Path(*module.split(".")).with_suffix(".py")
    if not app.is_file():
        pytest.skip(f"{app.relative_to(REPO)} not written yet (the operator issue)")


def test_operator_image_is_slim_and_non_root() -> None:
    steps = instructions("Dockerfile.operator")
    assert "slim" in build_args("Dockerfile.operator")["PYTHON_IMAGE"]
    (user,) = [i.args for i in steps if i.keyword == "USER"]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0, "numeric non-root USER"
    assert "trainer" not in " ".join(i.args for i in steps if i.keyword == "RUN")


def test_trainer_build_args_match_the_api() -> None:
    args = build_args("Dockerfile.trainer")
    assert args["ENGINE"] in {e.value for e in Engine}
    assert args["FMS_HF_TUNING_VERSION"] == DEFAULT_FMS_HF_TUNING_VERSION
    text = (REPO / "Dockerfile.trainer").read_text()
    for engine in Engine:
        assert f'"{engine.value}"' in text, f"Dockerfile.trainer does not handle ENGINE={engine.value}"
    assert 'lock="/opt/ftbench/locks/fms-hf-tuning-${FMS_HF_TUNING_VERSION}.txt"' in text
    assert 'pip install --no-deps -r "$lock"' in text
    assert {"FLASH_ATTN", "BASE_IMAGE"} <= set(args)


def test_every_installable_release_has_a_lock_the_trainer_image_installs() -> None:
    """The image installs the same lock `ftbench engines` builds from; each holds its own release and no torch."""
    from ftbench.engines.releases import load_releases

    for release in load_releases().releases:
        if not release.installable:
            with pytest.raises(ValueError, match="cannot be installed"):
                release.lock_text()
            continue
        stack = release.stack()
        assert stack["fms-hf-tuning"] == release.version
        assert "torch" not in stack and "torchvision" not in stack
        assert {"transformers", "trl", "peft", "accelerate", "datasets", "pydantic", "pyyaml", "psutil"} <= set(stack)


def test_releases_that_train_vision_sets_carry_pillow() -> None:
    """ftbench_trainer.datasets draws the vision sets' JPEGs with pillow inside the fms-hf-tuning image
    that trains them; the releases with --dataset_image_field get it from their own stack."""
    from ftbench.engines.flags import releases_knowing
    from ftbench.engines.releases import load_releases

    releases = {r.version: r for r in load_releases().releases}
    vision = releases_knowing("--dataset_image_field")
    assert vision
    for version in vision:
        assert "pillow" in releases[version].stack(), version


def test_images_docs_list_every_tag_the_profile_uses() -> None:
    """trl in docs/images.md; each installable fms-hf-tuning release in the generated releases reference."""
    from ftbench.engines.releases import load_releases

    images = Images()
    assert images.image_for(Engine.TRL, "") in (REPO / "docs" / "images.md").read_text()
    reference = (REPO / "docs" / "reference" / "fms-releases.md").read_text()
    for release in load_releases().releases:
        tag = images.image_for(Engine.FMS_HF_TUNING, release.version)
        assert (tag in reference) == release.installable, release.version


def test_dockerfiles_spell_the_contract_names() -> None:
    """The build arguments, labels and users ftbench.contracts.images names are the Dockerfiles'."""
    from ftbench.contracts import images as C

    trainer = (REPO / "Dockerfile.trainer").read_text()
    operator = (REPO / "Dockerfile.operator").read_text()
    for arg in (
        C.ARG_BASE_IMAGE,
        C.ARG_ENGINE,
        C.ARG_FMS_VERSION,
        C.ARG_FMS_ACCELERATION,
        C.ARG_FLASH_ATTN,
        C.ARG_LIGER_KERNEL,
    ):
        assert re.search(rf"^ARG {arg}=", trainer, re.M), arg
    assert re.search(rf"^ARG {C.ARG_PYTHON_IMAGE}=", operator, re.M)
    assert f'{C.ENGINE_LABEL}="${{ENGINE}}"' in trainer and f"{C.FMS_VERSION_LABEL}=" in trainer
    assert re.search(rf"^USER {C.TRAINER_UID}$", trainer, re.M)
    assert re.search(rf"^USER {C.OPERATOR_UID}:{C.OPERATOR_UID}$", operator, re.M)
