"""What the built images hold: the names and labels the cluster profile expects, the users the
chart and the profile run them as, their entrypoints, and the split of the stacks (no torch in
the operator, no kopf in the trainer, the base's torch kept)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ftbench
from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts import images as C
from ftbench.engines.releases import load_releases
from ftbench.images import plan, store
from ftbench.render.manifests import render_experiment
from ftbench_devcluster.kubelet import images as images_mode
from ftbench_devcluster.kubelet.containers import isolation_prefix
from ftbench_devcluster.podrun import EXIT_FILE, SPEC_FILE

pytestmark = pytest.mark.images


def run_in(ref: str, *argv: str, tmp: Path) -> str:
    """``argv`` in ``ref`` as the local kubelet's image mode runs a container (``podrun`` in its
    own namespaces, an overlay on the image's shared root, the image's user and environment);
    the exit code and the output. A fresh ``buildah from`` would copy the whole root (vfs)."""
    image = images_mode.load(ref)
    who = images_mode.user({}, {"name": "probe"}, image)
    spec = {
        "argv": list(argv), "env": image.env(), "isolate": True, "rootfs": str(image.rootfs),
        "user": {"uid": who.uid, "gid": who.gid, "groups": list(who.groups)},
    }  # fmt: skip
    directory = Path(tempfile.mkdtemp(dir=tmp))
    (directory / SPEC_FILE).write_text(json.dumps(spec))
    prefix = isolation_prefix()
    assert prefix is not None, "image mode needs mount namespaces"
    env = {**os.environ, "PYTHONPATH": str(Path(ftbench.__file__).parents[1])}
    cmd = [*prefix, sys.executable, "-m", "ftbench_devcluster.podrun", str(directory)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    exit_code = json.loads((directory / EXIT_FILE).read_text())["exitCode"]
    return f"exit {exit_code}\n{done.stdout}{done.stderr}"


def trainers(images: list[plan.ImageBuild]) -> Iterator[plan.ImageBuild]:
    return (i for i in images if i.dockerfile == "Dockerfile.trainer")


def rendered_image(engine: str, version: str) -> str:
    """The image of the training pod the operator renders for a spec of ``engine``/``version``."""
    spec = FineTuneExperimentSpec.model_validate(
        {"model": "ftbench-tiny-llama", "modelMaxLength": 256, "numberGpus": 0, "batchSize": 2, "engine": engine}
        | ({"fmsHfTuningVersion": version} if engine == "fms-hf-tuning" else {})
    )
    rendered = render_experiment(spec, load_catalog(), ClusterProfile(), name="x", namespace="n")
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("image"), str) and "containers" not in node:
                found.append(node["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(list(rendered.objects))
    assert len(set(found)) == 1, found
    return found[0]


def test_every_image_is_current(images: list[plan.ImageBuild]) -> None:
    """The cache key each image carries is the one its inputs give now: the next build skips it."""
    assert {i.ref: store.label(i.ref, C.CACHE_KEY_LABEL) for i in images} == {i.ref: i.key for i in images}


def test_pruning_keeps_the_root_file_systems_of_current_images(images: list[plan.ImageBuild]) -> None:
    """CI's e2e pods lost files mid-import ("No module named 'pickletools'"): each test session's
    build pruned every kubelet root file system, `buildah images` IDs being short and the
    containers' whole. Now a prune leaves a current image's mounted root alone."""
    ref = next(trainers(images)).ref
    root = store.rootfs(ref)
    store.prune()
    assert (root / "usr" / "lib" / "python3.11" / "pickletools.py").exists()
    assert store.rootfs(ref) == root


def test_trainer_tags_and_labels_are_what_an_experiment_renders_to(images: list[plan.ImageBuild]) -> None:
    for image in trainers(images):
        engine = image.args[C.ARG_ENGINE]
        version = image.args.get(C.ARG_FMS_VERSION, load_releases().default)
        assert image.ref == rendered_image(engine, version)
        labels = store.config(image.ref)["Labels"]
        assert labels[C.ENGINE_LABEL] == engine
        if engine == "fms-hf-tuning":
            assert labels[C.FMS_VERSION_LABEL] == version


def test_users_and_entrypoints(images: list[plan.ImageBuild]) -> None:
    """The operator runs as the chart's 10001, the trainer as the profile's runAsUser (1000)."""
    operator = store.config(plan.operator_image())
    assert operator["User"] == f"{C.OPERATOR_UID}:{C.OPERATOR_UID}"
    assert operator["Entrypoint"][:3] == ["kopf", "run", "--standalone"]
    assert ClusterProfile().security.run_as_user == C.TRAINER_UID
    for image in trainers(images):
        config = store.config(image.ref)
        assert config["User"] == str(C.TRAINER_UID) and config["Entrypoint"] == ["ftbench-trainer"]


# One container per image for every question below (each start reads a cold root file system: three
# containers per trainer image made this file one of CI's slowest): the user, the Python and its
# bounds, which of the stacks' modules import, and what the entrypoint says to --help.
PROBE = r"""
import importlib, importlib.metadata as m, importlib.util as u, json, os, subprocess, sys
modules, entry = sys.argv[1].split(","), sys.argv[2:]
out = {"uid": os.getuid(), "python": "%d.%d.%d" % sys.version_info[:3],
       "ftbenchRequiresPython": m.metadata("ftbench")["Requires-Python"],
       "fmsRequiresPython": m.metadata("fms-hf-tuning")["Requires-Python"] if u.find_spec("tuning") else "",
       "imports": {}}
for name in modules:
    try:
        module = importlib.import_module(name)
        out["imports"][name] = "ok " + str(getattr(module, "__version__", ""))
    except Exception as err:
        out["imports"][name] = f"{type(err).__name__}: {err}"
if entry:
    done = subprocess.run(entry, capture_output=True, text=True)
    out["entry"] = f"exit {done.returncode}\n{done.stdout}{done.stderr}"
print("PROBE " + json.dumps(out))
"""
OPERATOR_MODULES = ("kopf", "ftbench_operator.app", "torch")
TRAINER_MODULES = ("torch", "ftbench_trainer", "kopf")


@pytest.fixture(scope="module")
def probed(images: list[plan.ImageBuild], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each image's probe answer (see PROBE), by image name."""
    tmp = tmp_path_factory.mktemp("probe")
    answers: dict[str, dict[str, Any]] = {}
    for image in images:
        trainer = image.dockerfile == "Dockerfile.trainer"
        modules = ",".join(TRAINER_MODULES if trainer else OPERATOR_MODULES)
        entry = ["ftbench-trainer", "--help"] if trainer else []
        out = run_in(image.ref, "python", "-c", PROBE, modules, *entry, tmp=tmp)
        lines = [line for line in out.splitlines() if line.startswith("PROBE ")]
        assert out.startswith("exit 0") and lines, out
        answers[image.ref] = json.loads(lines[0].removeprefix("PROBE "))
    return answers


def test_operator_image_has_kopf_and_no_torch(probed: dict[str, dict[str, Any]]) -> None:
    answer = probed[plan.operator_image()]
    assert answer["uid"] == C.OPERATOR_UID
    assert answer["imports"]["kopf"].startswith("ok") and answer["imports"]["ftbench_operator.app"].startswith("ok")
    assert answer["imports"]["torch"] == "ModuleNotFoundError: No module named 'torch'"


@pytest.mark.parametrize("engine", ["trl", "fms-hf-tuning"])
def test_trainer_images_keep_the_base_torch_and_have_no_kopf(
    images: list[plan.ImageBuild], probed: dict[str, dict[str, Any]], engine: str
) -> None:
    for image in (i for i in trainers(images) if i.args[C.ARG_ENGINE] == engine):
        answer = probed[image.ref]
        assert answer["uid"] == C.TRAINER_UID, answer
        assert answer["imports"]["torch"].split("+")[0] == f"ok {load_releases().cpu_torch}", answer
        assert answer["imports"]["ftbench_trainer"].startswith("ok"), answer
        assert answer["imports"]["kopf"] == "ModuleNotFoundError: No module named 'kopf'", answer
        assert answer["entry"].startswith("exit 0") and "usage" in answer["entry"].lower(), answer


def test_python_of_every_image_meets_the_bounds(
    images: list[plan.ImageBuild], probed: dict[str, dict[str, Any]]
) -> None:
    """The image's Python is inside ftbench's requires-python and, in an fms-hf-tuning image,
    inside the release's own Requires-Python (what docs/images.md's table states)."""
    from packaging.specifiers import SpecifierSet

    for image in images:
        answer = probed[image.ref]
        python = answer["python"]
        assert python in SpecifierSet(answer["ftbenchRequiresPython"]), (image.ref, answer)
        if image.args.get(C.ARG_ENGINE) == "fms-hf-tuning":
            fms_bound = answer["fmsRequiresPython"]
            assert fms_bound and python in SpecifierSet(fms_bound), (image.ref, answer)
