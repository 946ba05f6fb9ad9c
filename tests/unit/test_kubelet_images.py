"""Image mode of the local kubelet: Kubernetes' rules for what a container gets from its image
(command over ENTRYPOINT/CMD, the user, runAsNonRoot, HOME), without buildah."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftbench.images.plan import copy_sources
from ftbench_devcluster.kubelet.images import DEFAULT_PATH, Image, user
from ftbench_devcluster.podspec import PodConfigError

PASSWD = "root:x:0:0:root:/root:/bin/bash\nftbench:x:10001:10001::/nonexistent:/usr/sbin/nologin\n"


def image(tmp_path: Path, **config: object) -> Image:
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "passwd").write_text(PASSWD)
    (tmp_path / "etc" / "group").write_text("root:x:0:\nftbench:x:10001:\n")
    return Image("example:1", tmp_path, dict(config))


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({}, ["kopf", "run", "--all-namespaces"]),
        ({"args": ["--namespace=a"]}, ["kopf", "run", "--namespace=a"]),
        ({"command": ["python"]}, ["python"]),
        ({"command": ["python"], "args": ["-V"]}, ["python", "-V"]),
    ],
)
def test_command_and_args_over_entrypoint_and_cmd(tmp_path: Path, container: dict, argv: list[str]) -> None:
    img = image(tmp_path, Entrypoint=["kopf", "run"], Cmd=["--all-namespaces"])
    assert img.argv(container) == argv


def test_environment_of_the_image_with_a_default_path(tmp_path: Path) -> None:
    assert image(tmp_path, Env=["A=1=2"]).env() == {"A": "1=2", "PATH": DEFAULT_PATH}
    assert image(tmp_path, Env=["PATH=/opt/bin"]).env() == {"PATH": "/opt/bin"}


def test_user_from_the_pod_over_the_image(tmp_path: Path) -> None:
    img = image(tmp_path, User="10001:10001")
    assert user({}, {"name": "c"}, img).uid == 10001
    pod = {"spec": {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000}}}
    who = user(pod, {"name": "c", "securityContext": {"runAsUser": 1001}}, img)
    assert (who.uid, who.gid, who.groups, who.home) == (1001, 1000, (2000,), "/")


def test_named_user_and_home_from_the_image_passwd(tmp_path: Path) -> None:
    who = user({}, {"name": "c"}, image(tmp_path, User="ftbench"))
    assert (who.uid, who.gid, who.home) == (10001, 10001, "/nonexistent")


def test_run_as_non_root_refuses_a_root_image(tmp_path: Path) -> None:
    pod = {"spec": {"securityContext": {"runAsNonRoot": True}}}
    with pytest.raises(PodConfigError, match="runAsNonRoot"):
        user(pod, {"name": "c"}, image(tmp_path))


def test_cache_key_reads_the_copied_paths_of_both_dockerfiles() -> None:
    """The content key hashes what COPY reads from the context, not what a stage copies."""
    text = Path(__file__).resolve().parents[2].joinpath("Dockerfile.operator").read_text()
    assert copy_sources(text) == ["pyproject.toml", "README.md", "ftbench", "operator", "trainer-image"]
    assert copy_sources("COPY --from=build /wheels /wheels\nCOPY --chown=1:1 a b /x/\n") == ["a", "b"]
