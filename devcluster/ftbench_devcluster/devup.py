"""``ftbench dev up/down/status``: a one-command local cluster (control plane, operator, kubelet).

Why a supervisor process: ``ControlPlane`` ties its servers to the process that started them
(PR_SET_PDEATHSIG, so a killed test run leaks nothing). ``dev up`` must return to the shell
while the cluster keeps running, so it starts ``python -m ftbench_devcluster.devup serve`` in a
new session; that process owns the control plane, the local kubelet and the operator, and stops
all of them on SIGTERM (what ``dev down`` sends).

State dir layout (default ``~/.ftbench/dev``): ``kubeconfig``, ``state.json`` (pids, server,
readiness), ``logs/{supervisor,kubelet,operator}.log``, ``control-plane/`` (etcd data, PKI,
server logs), ``kubelet/`` (pods' files and logs; ``kubelet/pvc/<claim>`` stands in for PVCs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ftbench.host.procs import pid_alive, signal_group, stop_process_group
from ftbench_devcluster.kubelet import kill_all_pods

DEFAULT_STATE_DIR = Path.home() / ".ftbench" / "dev"
NODE_NAME = "ftbench-dev"
STATE_FILE = "state.json"
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 30.0
TINY_MODEL = "ftbench-tiny-llama"  # catalog model built locally; its weights path under the model root


@dataclass(frozen=True)
class Layout:
    """Paths inside the state dir."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def control_plane(self) -> Path:
        return self.root / "control-plane"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    def read_state(self) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(self.state.read_text()))
        return None

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state)


def default_operator_command() -> list[str] | None:
    """``python -m ftbench_operator`` when the operator package and kopf are installed."""
    if importlib.util.find_spec("kopf") is None or importlib.util.find_spec("ftbench_operator") is None:
        return None
    with socket.socket() as s:  # kopf's liveness endpoint on a free loopback port, not 0.0.0.0:8080
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [sys.executable, "-m", "ftbench_operator", f"--liveness=http://127.0.0.1:{port}/healthz"]


def seed_models(pvc_dir: Path) -> Path | None:
    """Put the tiny local model where the default cluster profile's model PVC is.

    The models claim is mounted read-only in training pods, as on a real cluster, so the trainer
    cannot build the tiny model there itself: ``dev up`` builds it once into the claim's stand-in
    directory. Skipped (None) without the trainer extra.
    """
    from ftbench.api.profile import ClusterProfile

    if importlib.util.find_spec("ftbench_trainer") is None or importlib.util.find_spec("torch") is None:
        return None
    profile = ClusterProfile()
    models = profile.storage.models
    if not models.claim_name:
        return None
    claim = pvc_dir / models.claim_name
    # HF_HOME lives on the same claim; it must exist before the pods start.
    hf_home = PurePosixPath(profile.storage.hf_home)
    if hf_home.is_relative_to(models.mount_path):
        (claim / hf_home.relative_to(models.mount_path)).mkdir(parents=True, exist_ok=True)
    # The trainer package runs as its own process, the way `ftbench run` starts it: ftbench (pydantic
    # and pyyaml) never imports the trainer's torch stack.
    built = subprocess.run(
        [sys.executable, "-m", "ftbench_trainer.tiny_model", str(claim / TINY_MODEL)],
        check=True,
        capture_output=True,
        text=True,
    )
    if os.geteuid() == 0:
        _give_to_trainer(claim, profile.security.run_as_user, profile.security.run_as_group)
    return Path(built.stdout.strip().splitlines()[-1])


def _give_to_trainer(claim: Path, uid: int, gid: int) -> None:
    """Hand the claim's contents to the trainer's user, as an admin prepares a claim for it.

    In its image (the kubelet's image mode) the trainer runs as the profile's non-root
    runAsUser: it writes its caches under HF_HOME, and rebuilds the tiny model in place when
    its transformers major differs from the one that built it (the fms-hf-tuning images).
    """
    for root, dirs, files in os.walk(claim):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


# -- the supervisor (``serve``) -------------------------------------------------------------------


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``timeout``."""
    stop_process_group(proc, ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)))


def serve(args: argparse.Namespace) -> int:
    """Run the cluster until SIGTERM/SIGINT; ``state.json`` says ``ready`` once it is usable."""
    from kubernetes import config

    from ftbench.api.crd import crd, sweep_crd
    from ftbench_devcluster import ControlPlane
    from ftbench_devcluster.crds import install_crd

    layout = Layout(Path(args.state_dir).resolve())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    shutil.rmtree(layout.control_plane, ignore_errors=True)  # a fresh cluster each time: ports and certs change
    cp = ControlPlane(layout.control_plane, keep_workdir=True)
    children: dict[str, subprocess.Popen[bytes]] = {}
    state: dict[str, Any] = {"supervisor": os.getpid(), "ready": False, "components": {}}
    try:
        cp.start()
        shutil.copyfile(cp.kubeconfig, layout.kubeconfig)
        layout.kubeconfig.chmod(0o600)
        api = config.new_client_from_config(config_file=str(layout.kubeconfig))
        install_crd(api, crd())
        install_crd(api, sweep_crd())
        api.close()
        if not args.no_seed_models:
            print(f"tiny model: {seed_models(layout.kubelet / 'pvc')}", flush=True)
        env = {**os.environ, "KUBECONFIG": str(layout.kubeconfig)}
        kubelet = [sys.executable, "-m", "ftbench_devcluster.kubelet", "--kubeconfig", str(layout.kubeconfig),
                   "--node-name", NODE_NAME, "--state-dir", str(layout.kubelet)]  # fmt: skip
        for label in args.label:
            kubelet += ["--label", label]
        if args.gpus is not None:
            kubelet += ["--gpus", str(args.gpus)]
        if args.images:
            kubelet.append("--images")
        children["kubelet"] = _spawn(kubelet, layout.logs / "kubelet.log", env)
        operator = (
            shlex.split(args.operator_cmd)
            if args.operator_cmd
            else (None if args.no_operator else default_operator_command())
        )
        if operator:
            children["operator"] = _spawn(operator, layout.logs / "operator.log", env)
        state.update(
            ready=True, server=cp.server, kubeconfig=str(layout.kubeconfig),
            components={**{f"control-plane/{k}": v for k, v in cp.pids.items()}, **{k: p.pid for k, p in children.items()}},
            operator=" ".join(operator) if operator else None,
        )  # fmt: skip
        layout.write_state(state)
        print(f"ftbench dev cluster ready at {cp.server}", flush=True)
        while not stop.wait(2.0):
            for name, proc in children.items():
                if proc.poll() is not None and not state.get(f"{name}_exited"):
                    state[f"{name}_exited"] = proc.returncode
                    layout.write_state(state)
                    print(f"{name} exited with code {proc.returncode}; see {layout.logs / (name + '.log')}", flush=True)
        return 0
    except Exception as err:
        state["error"] = f"{type(err).__name__}: {err}"
        layout.write_state(state)
        print(f"ftbench dev cluster failed: {state['error']}", flush=True)
        return 1
    finally:
        for proc in reversed(list(children.values())):
            _stop(proc)
        kill_all_pods(layout.kubelet)
        cp.stop()
        with contextlib.suppress(OSError):
            layout.state.unlink()
        print("ftbench dev cluster stopped", flush=True)


# -- the user-facing commands ---------------------------------------------------------------------


def running_supervisor(layout: Layout) -> int | None:
    state = layout.read_state()
    pid = int(state["supervisor"]) if state and state.get("supervisor") else None
    return pid if pid is not None and pid_alive(pid) else None


def up(state_dir: Path, *, labels: list[str], gpus: int | None, no_operator: bool, operator_cmd: str | None,
       seed_models: bool = True, timeout: float = READY_TIMEOUT, images: bool = False) -> int:  # fmt: skip
    layout = Layout(state_dir.resolve())
    if running_supervisor(layout):
        print(f"already running (state dir {layout.root}); `ftbench dev status` / `ftbench dev down`")
        return 0
    layout.logs.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        layout.state.unlink()
    argv = [sys.executable, "-m", "ftbench_devcluster.devup", "serve", "--state-dir", str(layout.root)]
    for label in labels:
        argv += ["--label", label]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    if no_operator:
        argv.append("--no-operator")
    if operator_cmd:
        argv += ["--operator-cmd", operator_cmd]
    if not seed_models:
        argv.append("--no-seed-models")
    if images:
        argv.append("--images")
    supervisor = _spawn(argv, layout.logs / "supervisor.log", dict(os.environ))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = layout.read_state() or {}
        if state.get("ready"):
            break
        if state.get("error") or supervisor.poll() is not None:
            print(
                f"ftbench dev up failed: {state.get('error', 'the supervisor exited')}; see {layout.logs}",
                file=sys.stderr,
            )
            _stop(supervisor)
            return 1
        time.sleep(0.3)
    else:
        print(f"ftbench dev up: not ready after {timeout:.0f}s; see {layout.logs}", file=sys.stderr)
        _stop(supervisor)
        return 1
    print(usage(layout, state))
    return 0


def usage(layout: Layout, state: dict[str, Any]) -> str:
    operator = "running" if state.get("operator") else "not started (install the operator extra, or --operator-cmd)"
    return f"""\
ftbench dev cluster is up: API server {state.get("server")}, node {NODE_NAME}, operator {operator}.
Logs: {layout.logs}   PVC stand-ins: {layout.kubelet / "pvc"}/<claimName>

  export KUBECONFIG={layout.kubeconfig}
  kubectl get nodes
  kubectl apply -f examples/quickstart.yaml
  kubectl get fte -w

Stop it with: {stop_command(layout.root)}"""


def stop_command(root: Path) -> str:
    """The command that stops the cluster under `root` (--state-dir is an option of `dev`, before the action)."""
    return "ftbench dev down" if root == DEFAULT_STATE_DIR else f"ftbench dev --state-dir {shlex.quote(str(root))} down"


def down(state_dir: Path, timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM the supervisor (it stops everything); SIGKILL whatever is left after ``timeout``."""
    layout = Layout(state_dir.resolve())
    state = layout.read_state() or {}
    pids = [int(p) for p in (state.get("components") or {}).values()]
    supervisor = running_supervisor(layout)
    if supervisor is None and not any(pid_alive(p) for p in pids):
        print("not running")
        kill_all_pods(layout.kubelet)
        return 0
    if supervisor is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(supervisor):
            time.sleep(0.2)
    for pid in [*pids, *([supervisor] if supervisor else [])]:  # leftovers of a supervisor that did not finish
        if pid_alive(pid):
            signal_group(pid, signal.SIGKILL)
    kill_all_pods(layout.kubelet)
    with contextlib.suppress(OSError):
        layout.state.unlink()
    print("ftbench dev cluster stopped")
    return 0


def status(state_dir: Path) -> int:
    """Print what runs; exit 0 if the cluster is up, 1 otherwise."""
    layout = Layout(state_dir.resolve())
    state = layout.read_state()
    supervisor = running_supervisor(layout)
    if state is None or supervisor is None:
        print(f"not running (state dir {layout.root})")
        return 1
    print(f"state dir   {layout.root}\nkubeconfig  {layout.kubeconfig}\nserver      {state.get('server')}")
    print(f"supervisor  pid {supervisor}  running")
    for name, pid in (state.get("components") or {}).items():
        print(f"{name:<35} pid {pid:<8} {'running' if pid_alive(int(pid)) else 'EXITED'}")
    return 0 if state.get("ready") else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ftbench_devcluster.devup")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the dev cluster in the foreground (what `ftbench dev up` starts)")
    s.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR))
    s.add_argument("--label", action="append", default=[], metavar="K=V")
    s.add_argument("--gpus", type=int)
    s.add_argument("--no-operator", action="store_true")
    s.add_argument("--operator-cmd")
    s.add_argument("--no-seed-models", action="store_true")
    s.add_argument("--images", action="store_true")
    args = p.parse_args(argv)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
