"""The end-to-end tests' cluster: control plane, scheduler, two nodes, real operator (fixtures in conftest).

Everything is real except the GPUs and the network between nodes: the operator (``python -m
ftbench_operator``) runs against the session's 1.20 control plane, the real kube-scheduler places the
pods on two local kubelets (``python -m ftbench_devcluster.kubelet``, one per node, sharing one
directory of PersistentVolumeClaims as nodes share a ReadWriteMany volume), and the kubelets run the
rendered pods' ``ftbench-trainer`` on the CPU with the tiny model, in their images where buildah is
here. The nodes look like the cluster the operator's profile describes (`ftbench_devcluster.rig`): its
labels, GPU and RDMA resources, and taints for its tolerations, so a pod a cluster would not place
stays Pending with ``FailedScheduling`` here too. The processes start once for the whole package
(starting them and seeding the model costs more than most tests), and the restart test kills and
restarts them in place, so they are objects with ``start``/``kill`` rather than plain fixtures.

The scheduler has its own name, which the profile gives the training pods (``schedulerName``): pods
of other test folders sharing the control plane (which expect to play the kubelet themselves) name
the default-scheduler, which does not run, and stay Pending as they expect.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from trainer_rbac import grant_progress

from ftbench.api.profile import ClusterProfile
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION
from ftbench.contracts.kube import Obj
from ftbench.contracts.labels import EXPERIMENT_LABEL
from ftbench_devcluster.devup import default_operator_command
from ftbench_devcluster.kubelet import kill_all_pods
from ftbench_devcluster.rig import RigNode

REPO = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("FTBENCH_SHARED_DIR", REPO.parent / "shared"))
PYTORCHJOB_CRD_FILE = SHARED_DIR / "fixtures" / "kubeflow" / "kubeflow.org_pytorchjobs.v1.9.2.yaml"
RIG = f"e2e-{uuid.uuid4().hex[:6]}"
NODES = (f"{RIG}-a", f"{RIG}-b")
SCHEDULER = f"ftbench-{RIG}"
# Offline, single-threaded CPU training: nothing is downloaded and two ranks share 2 cores fairly.
TRAINER_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# A 1.20 cluster (no Indexed Jobs, no podFailurePolicy) with the training operator, which the
# tests play. Storage stays the default: `seed_models` puts the tiny model where it points.
PROFILE: dict[str, Any] = {
    "features": {"indexedJobs": False, "podFailurePolicy": False, "trainingOperator": True},
    "schedulerName": SCHEDULER,
}
# Each node stands for a cluster's node, whose capacity the scheduler compares with the pods' requests (the
# profile's defaultMemory, 64Gi, is more than a CI machine has; the kubelet enforces no limits): two A100s
# (which no test's pod gets: the trainer would find no CUDA), 64 cores, 1 TiB.
RIG_GPU_MODEL = "NVIDIA-A100-SXM4-80GB"
RIG_NODE = RigNode(gpus=2, gpu_model=RIG_GPU_MODEL, cpu="64", memory="1Ti")
TERMINAL = ("Succeeded", "Failed", "Invalid")

REPO_EXAMPLES = REPO / "examples"


def on_the_rig(profile: Obj) -> Obj:
    """A cluster profile with what the rig cannot take from it replaced, and only that: its image registry
    (the rig's images are built here under the default repository), 1.20's features and the rig's scheduler."""
    from ftbench.api.profile import DEFAULT_TRAINER_IMAGE

    return profile | {
        "images": {**(profile.get("images") or {}), "repository": DEFAULT_TRAINER_IMAGE},
        "features": PROFILE["features"],
        "schedulerName": PROFILE["schedulerName"],
    }


T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """``check()`` until it returns something truthy; API errors while objects appear count as no, a failed
    assertion in ``check`` fails at once."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except AssertionError:
            raise
        except Exception as err:
            last = err
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last!r})")


class Components:
    """Several `Component`s started, killed and read together (the nodes' kubelets)."""

    def __init__(self, name: str, members: list[Component]) -> None:
        self.name, self.members = name, members

    def start(self, timeout: float = 60.0) -> None:
        for member in self.members:
            member.start(timeout)

    def state(self) -> str:
        return "; ".join(f"{m.name}: {m.state()}" for m in self.members)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for member in self.members:
            member.kill(sig)

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def log(self) -> str:
        return "\n".join(f"--- {m.name}\n{m.log()[-2000:]}" for m in self.members)


class Component:
    """A long-running subprocess (operator or kubelet) that tests may kill and start again.

    ``kill`` sends SIGKILL to the process only, not its group: a crashed kubelet leaves its
    containers running (the next one adopts them), and a crashed operator has no children.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool]):
        self.name, self.argv, self.env, self.log_file, self.ready = name, argv, env, log, ready
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        with self.log_file.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,
            )  # fmt: skip
        poll(lambda: self._alive() and self.ready(), timeout, f"{self.name} ready")

    def state(self) -> str:
        """For a failure report: running, exited (with its code), or not started."""
        if self.proc is None:
            return "not running (stopped by the test, or never started)"
        code = self.proc.poll()
        return f"running (pid {self.proc.pid})" if code is None else f"exited with {code}"

    def _alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)
        self.proc = None

    def stop(self) -> None:
        try:
            self.kill(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


class Cluster:
    """The package's cluster: API access, the two components, and experiment helpers."""

    def __init__(self, control_plane: Any, kube_api: Any, workdir: Path, *, images: bool = False) -> None:
        from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi

        self.control_plane, self.api, self.workdir, self.images = control_plane, kube_api, workdir, images
        self.core, self.batch, self.custom = CoreV1Api(kube_api), BatchV1Api(kube_api), CustomObjectsApi(kube_api)
        self.closed = False
        self.scheduler: str | None = None  # the control plane's process key while it runs
        self.kubelet_dir = workdir / "kubelet"
        self.pvc_dir = self.kubelet_dir / "pvc"  # the nodes' shared claims
        self.pvc_dir.mkdir(parents=True)
        self.env = {**os.environ, **TRAINER_ENV, "KUBECONFIG": str(control_plane.kubeconfig)}
        self.kubelets = Components(
            "kubelets",
            [
                Component(f"kubelet {n}", [], self.env, workdir / f"kubelet-{n}.log", lambda n=n: self._node_ready(n))
                for n in NODES
            ],
        )
        operator_argv = default_operator_command()
        if operator_argv is None:
            pytest.skip("the operator extra (kopf, ftbench_operator) is not installed")
        self.profile_file = workdir / "profile.yaml"
        operator_env = {
            **self.env,
            "FTBENCH_OPERATOR_PROFILE_FILE": str(self.profile_file),
            "FTBENCH_OPERATOR_METRICS_PORT": "0",
            "FTBENCH_OPERATOR_API_RETRY_DELAY_SECONDS": "0.5",
        }
        liveness = next(a for a in operator_argv if a.startswith("--liveness=")).partition("=")[2]
        self.operator = Component(
            "operator", operator_argv, operator_env, workdir / "operator.log", lambda: _http_ok(liveness)
        )
        self.configure(PROFILE, RIG_NODE)

    def configure(self, profile: Obj, node: RigNode) -> None:
        """The profile the operator reads and the nodes' look (taken from it), for the next start."""
        self.profile_file.write_text(yaml.safe_dump(profile))
        node_args = node.kubelet_args(ClusterProfile.model_validate(profile))
        for name, kubelet in zip(NODES, self.kubelets.members, strict=True):
            kubelet.argv = [
                sys.executable, "-m", "ftbench_devcluster.kubelet", "--kubeconfig", str(self.control_plane.kubeconfig),
                "--node-name", name, "--state-dir", str(self.kubelet_dir / name), "--pvc-dir", str(self.pvc_dir),
                "--gpus", "0", "--interval", "0.2", "--no-bind",
                *(a for k in TRAINER_ENV for a in ("--pass-env", k)), *(["--images"] if self.images else []),
                *node_args,
            ]  # fmt: skip

    @contextlib.contextmanager
    def profile(self, profile: Obj, node: RigNode) -> Iterator[None]:
        """The operator on another cluster profile and the nodes as that cluster's, then back to the rig's."""
        self._restart(profile, node)
        try:
            yield
        finally:
            self._restart(PROFILE, RIG_NODE)

    def _restart(self, profile: Obj, node: RigNode) -> None:
        self.operator.stop()
        self.kubelets.stop()
        self.configure(profile, node)
        self.kubelets.start()
        self.operator.start()

    def _node_ready(self, name: str) -> bool:
        node = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def start(self, *, operator: bool = True) -> None:
        """The scheduler, the kubelets (which register their nodes) and the operator (unless it comes otherwise,
        as the chart's pod)."""
        self.scheduler = self.control_plane.start_scheduler(SCHEDULER)
        self.kubelets.start()
        if operator:
            self.operator.start()
        self.closed = False

    def close(self) -> None:
        """Stop the components and take the nodes away (the package fixture's cluster stays; see reopen)."""
        self.closed = True
        self.operator.stop()
        self.kubelets.stop()
        if self.scheduler is not None:
            self.control_plane.stop_process(self.scheduler)
            self.scheduler = None
        for name in NODES:
            kill_all_pods(self.kubelet_dir / name)
            self.control_plane.request("DELETE", f"/api/v1/nodes/{name}")

    def reopen(self) -> None:
        """Everything again after ``close``."""
        self.start()

    def serve(self, namespace: str) -> str:
        """Let the trainer report progress in ``namespace`` (the progress rule bound to the namespace's default
        ServiceAccount, which the pods use when the profile names none). Any namespace's pods that name the rig's
        scheduler run on the rig's nodes."""
        from kubernetes.client import RbacAuthorizationV1Api

        grant_progress(RbacAuthorizationV1Api(self.api), namespace, "default")
        self.claims(namespace, ClusterProfile.model_validate(yaml.safe_load(self.profile_file.read_text())))
        return namespace

    def claims(self, namespace: str, profile: ClusterProfile) -> None:
        """The profile's PersistentVolumeClaims in ``namespace``, each bound to a PersistentVolume on the nodes'
        shared claims directory, as an admin provisions them: kube-scheduler does not place a pod whose claim
        is missing or unbound."""
        from kubernetes.client.exceptions import ApiException

        for volume in (profile.storage.models, profile.storage.data):
            if not volume.claim_name:
                continue
            pv_name, storage = f"{namespace}-{volume.claim_name}", {"storage": "100Gi"}
            with contextlib.suppress(ApiException):  # already there (409): a second profile with the same claims
                self.core.create_persistent_volume(
                    {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
                     "spec": {"capacity": storage, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                              "persistentVolumeReclaimPolicy": "Retain",
                              "hostPath": {"path": str(self.pvc_dir / volume.claim_name)},
                              "claimRef": {"namespace": namespace, "name": volume.claim_name}}}
                )  # fmt: skip
                self.core.create_namespaced_persistent_volume_claim(
                    namespace,
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": volume.claim_name},
                     "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                              "resources": {"requests": storage}}},
                )  # fmt: skip
        poll(lambda: self._claims_bound(namespace), 60, f"the claims in {namespace} bound")

    def _claims_bound(self, namespace: str) -> bool:
        return all(
            c.status.phase == "Bound" for c in self.core.list_namespaced_persistent_volume_claim(namespace).items
        )

    # -- experiments ------------------------------------------------------------------------------

    def apply(self, namespace: str, name: str, spec: Obj) -> None:
        """``kubectl apply`` of the CR, as a user would create it."""
        doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        subprocess.run(
            ["kubectl", "apply", "-n", namespace, "-f", "-"],
            input=json.dumps(doc).encode(), env={**os.environ, "KUBECONFIG": str(self.control_plane.kubeconfig)},
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def experiment(self, namespace: str, name: str) -> Obj:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def follow(self, namespace: str, name: str, timeout: float, on_poll: Callable[[], None] | None = None) -> Follow:
        """Poll the experiment until it ends, recording each status seen on the way."""
        seen: list[Obj] = []

        def done() -> Obj | None:
            if on_poll is not None:
                on_poll()
            status = self.experiment(namespace, name).get("status") or {}
            if not seen or seen[-1] != status:
                seen.append(status)
            return status if status.get("phase") in TERMINAL else None

        try:
            final = poll(done, timeout, f"experiment {namespace}/{name} to finish", interval=0.1)
        except AssertionError as err:
            jobs = [j.metadata.name for j in self.batch.list_namespaced_job(namespace).items]
            events = [f"{e.reason}: {e.message}" for e in self.core.list_namespaced_event(namespace).items]
            raise AssertionError(f"{err}\nlast status: {seen[-1:]}\njobs: {jobs}\nevents: {events}") from None
        return Follow(final, seen)

    def placement(self, namespace: str, name: str, nodes: int, on_poll: Callable[[], None] | None = None) -> list[str]:
        """The nodes kube-scheduler put experiment ``name``'s pods on, once ``nodes`` of them are placed (sorted)."""

        def placed() -> list[str] | None:
            status = self.experiment(namespace, name).get("status") or {}
            assert status.get("phase") != "Invalid", status
            if on_poll is not None and status.get("job"):
                on_poll()
            pods = self.pods(namespace, f"{EXPERIMENT_LABEL}={name}")
            on = sorted(p.spec.node_name for p in pods if p.spec.node_name)
            return on if len(on) == nodes else None

        return poll(placed, 120, f"{nodes} pod(s) of experiment {namespace}/{name} placed")

    def delete(self, namespace: str, name: str) -> None:
        """Delete experiment ``name`` and wait until its pods are gone (their GPUs free for the next one)."""
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        poll(lambda: not self.pods(namespace, f"{EXPERIMENT_LABEL}={name}"), 120, f"{namespace}/{name}'s pods gone")

    def pods(self, namespace: str, selector: str = "app.kubernetes.io/managed-by=ftbench") -> list[Any]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def container_specs(self, namespace: str, pod: str = "*") -> list[Obj]:
        """What the local kubelet gave the containers of ``pod`` (``podrun``'s spec.json): in
        image mode their root file system and user."""
        specs = sorted(self.kubelet_dir.glob(f"*/pods/{namespace}_{pod}_*/containers/*/spec.json"))
        return [json.loads(p.read_text()) for p in specs]

    def pod_log(self, namespace: str, pod: str) -> str:
        """The container log the local kubelet keeps (there is no log endpoint on this node)."""
        logs = sorted(self.kubelet_dir.glob(f"*/pods/{namespace}_{pod}_*/containers/*/log"))
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in logs)


class Follow:
    """An experiment's final status and every distinct status observed before it."""

    def __init__(self, final: Obj, seen: list[Obj]) -> None:
        self.final, self.seen = final, seen

    def progress_while_running(self) -> list[Obj]:
        return [s["progress"] for s in self.seen if s.get("progress") and s.get("phase") not in TERMINAL]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def tiny_lora_spec(**extra: Any) -> Obj:
    """LoRA on the tiny model on the CPU, small enough for seconds per run.

    modelMaxLength 256: with 128 the chars datasets' prompts leave no response and trl drops
    every row. The chars dataset is generated at its default size, which takes a moment.
    """
    return {
        "experiment": "finetune_lora_benchmark-v1.0.0",
        "engine": "trl",
        "model": "ftbench-tiny-llama",
        "datasetId": "news-chars-512-entries-4096",
        "modelMaxLength": 256,
        "numberGpus": 0,
        "batchSize": 2,
        "gradientAccumulationSteps": 1,
        "maxSteps": 10,
        "torchDtype": "float32",
        "gradientCheckpointing": False,
        **extra,
    }


def image_mode() -> bool:
    """Whether pods run in the built images: when buildah is here (the images are then built or
    found current by hack/build-images.sh), and always under ``FTBENCH_REQUIRE_IMAGES=1`` (CI),
    where a missing buildah or a failed build fails instead of falling back to host processes."""
    from ftbench.images import store

    required = os.environ.get("FTBENCH_REQUIRE_IMAGES") == "1"
    if not store.available() and not required:
        return False
    build_images()
    return True


def build_images() -> None:
    """hack/build-images.sh with this interpreter: builds what is missing or stale, else seconds."""
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "build-images.sh")], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"hack/build-images.sh failed ({done.returncode}):\n{done.stderr[-4000:]}", pytrace=False)
