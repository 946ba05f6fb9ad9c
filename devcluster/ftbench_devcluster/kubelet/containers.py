"""Starting one container: its spec file for ``podrun``, and ``podrun`` as a process of its own.

The kubelet resolves everything that needs the API server (environment, volumes) here and hands
``podrun`` a finished spec (``SPEC_FILE``), so the container process needs no credentials. With
isolation, ``podrun`` runs under ``unshare`` (private mount/UTS/PID namespaces) so it can
bind-mount volumes and ``/etc/hosts``, and killing its first process kills all it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlparse

import ftbench
import ftbench_devcluster
from ftbench.contracts.kube import Obj
from ftbench_devcluster import podspec
from ftbench_devcluster.kubelet import images
from ftbench_devcluster.kubelet.pod_state import ContainerRun, PodRun
from ftbench_devcluster.podrun import SPEC_FILE, now


def isolation_prefix() -> list[str] | None:
    """The ``unshare`` command line that gives a container its namespaces, or None if impossible.

    As root: mount + UTS + PID namespaces (the PID namespace means killing its first process
    kills everything the container started). As another user, the same inside a user namespace.
    """
    if shutil.which("unshare") is None:
        return None
    base = ["unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
    candidates = [base] if os.geteuid() == 0 else [[*base, "--user", "--map-root-user"]]
    for prefix in candidates:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([*prefix, "--", "true"], capture_output=True, timeout=10, check=False).returncode == 0:
                return [*prefix, "--"]
    return None


def base_env(
    server: str, bin_dir: str, hostname: str, pass_env: Iterable[str], *, host_paths: bool = True
) -> dict[str, str]:
    """What an image and a kubelet would put into every container's environment.

    Without an image (process mode) PATH and HOME are the host's, ``bin_dir`` first; in image
    mode (``host_paths`` false) the image's config provides them (`images.Image.env`).
    """
    url = urlparse(server)
    paths = {"PATH": podspec.default_path(bin_dir), "HOME": os.environ.get("HOME", "/root")} if host_paths else {}
    env = {
        **paths,
        "HOSTNAME": hostname,
        "KUBERNETES_SERVICE_HOST": url.hostname or "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(url.port or 443),
    }
    env.update({k: os.environ[k] for k in pass_env if k in os.environ})
    return env


def container_spec(
    view: Obj,
    container: Obj,
    run: PodRun,
    volumes: Mapping[str, podspec.VolumeDir],
    env_base: Mapping[str, str],
    objects: podspec.ObjectSource,
    *,
    isolate: bool,
    image: images.Image | None = None,
) -> Obj:
    """The ``podrun`` spec of one container (creating its directory and empty termination log).

    With an ``image``: its root file system, environment, command, working directory and user
    (`images`); the termination log is writable by any user, as a kubelet makes it.
    """
    extra: Obj = {}
    if image is not None:
        who = images.user(view, container, image)
        env_base = {**image.env(), **env_base}
        env_base.setdefault("HOME", who.home)
        container = {**container, "command": image.argv(container), "args": []}
        container.setdefault("workingDir", image.config.get("WorkingDir") or "")
        extra = {"rootfs": str(image.rootfs), "user": {"uid": who.uid, "gid": who.gid, "groups": list(who.groups)}}
    env = podspec.container_env(view, container, env_base, objects)
    argv = podspec.resolve_command(container, env)
    cdir = run.dir / "containers" / container["name"]
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "termination-log").write_bytes(b"")
    (cdir / "termination-log").chmod(0o666)
    mounts = podspec.container_mounts(container, volumes)
    mounts.append({"target": "/etc/hosts", "source": str(run.dir / "hosts"), "isFile": True})
    mounts.append(
        {"target": podspec.termination_message_path(container), "source": str(cdir / "termination-log"), "isFile": True}
    )
    return {
        "argv": argv,
        "env": env,
        "workingDir": container.get("workingDir", ""),
        "hostname": run.hostname,
        "mounts": mounts,
        "isolate": isolate,
        **extra,
    }


def spawn(c: ContainerRun, cspec: Obj, prefix: list[str] | None) -> None:
    """Write the spec and start ``podrun`` in a new session; record its pid for a later kubelet."""
    (c.dir / SPEC_FILE).write_text(json.dumps(cspec, indent=1))
    # podrun must import ftbench and this rig whatever the container's PYTHONPATH: its own env is the kubelet's.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(
                None,
                [
                    str(Path(ftbench.__file__).parents[1]),
                    str(Path(ftbench_devcluster.__file__).parents[1]),
                    os.environ.get("PYTHONPATH"),
                ],
            )
        ),
    }
    with (c.dir / "log").open("ab") as out:
        c.popen = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "ftbench_devcluster.podrun", str(c.dir)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=c.dir, env=env, start_new_session=True,
        )  # fmt: skip
    c.pid, c.started_at = c.popen.pid, now()
    (c.dir / "pid").write_text(json.dumps({"pid": c.pid, "startedAt": c.started_at}))
