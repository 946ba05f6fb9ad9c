"""Operator latency and memory on the local control plane (not a test: prints a markdown table).

    python bench/operator_latency.py [--experiments 200] [--total 1000]

Starts etcd + kube-apiserver + kube-controller-manager (ftbench_devcluster), installs the CRD,
runs the real operator (`python -m ftbench_operator`) as a subprocess and plays a kubelet that
completes every training pod the moment the Job controller creates it, with a real trainer
result as the termination message. Measured, all with one monotonic clock in this process:

- *CR created -> child created*: from the create call's return to the Job's ADDED watch event;
- *pod finished -> results in status*: from the kubelet's status write returning to the watch
  event showing `phase: Succeeded` with `results`;
- operator RSS (VmRSS of the operator process) after `--total` experiments have succeeded.

The first `--experiments` are created as one burst (as fast as the API accepts them), so the
latencies include queueing behind each other; targets: p99 <= 1 s, <= 2 s, RSS <= 250 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator"), str(REPO / "tests" / "operator")]

from operator_testkit import TEST_PROFILE, Kubelet, lora_spec, success_result  # noqa: E402

from ftbench.api.crd import crd  # noqa: E402
from ftbench.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION  # noqa: E402
from ftbench.contracts.env import operator_setting  # noqa: E402
from ftbench.contracts.labels import EXPERIMENT_LABEL, MANAGED_SELECTOR  # noqa: E402
from ftbench_devcluster import ControlPlane  # noqa: E402
from ftbench_devcluster.crds import install_crd  # noqa: E402

# The operator tests' experiment and cluster profile: the bench measures the same path they check.
SPEC = lora_spec()
PROFILE = TEST_PROFILE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] if ordered else float("nan")


def handler_means(port: str) -> dict[str, float]:
    """Mean duration of each operator handler, from its own Prometheus histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for suffix, into in (("_sum", sums), ("_count", counts)):
            prefix = f'ftbench_reconcile_duration_seconds{suffix}{{handler="'
            if line.startswith(prefix):
                handler = line[len(prefix) :].split('"', 1)[0]
                into[handler] = float(line.rsplit(" ", 1)[1])
    return {h: round(sums[h] / counts[h], 4) for h in sums if counts.get(h)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc, clock ticks -> seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Bench:
    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        from kubernetes import config

        self.api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        self.namespace = namespace
        self.lock = threading.Lock()
        self.created: dict[str, float] = {}
        self.child: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.results: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        # A real trainer result as the termination message (the operator tests' fake kubelet writes it).
        self.message = success_result().to_termination_message()
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(4)

    def start_watches(self) -> None:
        for target in (self._watch_jobs, self._watch_pods, self._watch_experiments):
            threading.Thread(target=target, daemon=True).start()

    def _watch(self, list_fn: Any, handle: Any, **kwargs: Any) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            try:
                for event in watch.Watch().stream(list_fn, self.namespace, timeout_seconds=30, **kwargs):
                    handle(event["type"], event["object"])
            except Exception:  # the control plane stopping under the watch at the end of the run
                if not self.stop.is_set():
                    time.sleep(0.5)

    def _watch_jobs(self) -> None:
        from kubernetes.client import BatchV1Api

        def handle(kind: str, job: Any) -> None:
            name = job.metadata.labels.get(EXPERIMENT_LABEL)
            with self.lock:
                if kind == "ADDED" and name and name not in self.child:
                    self.child[name] = time.monotonic()

        self._watch(BatchV1Api(self.api).list_namespaced_job, handle, label_selector=MANAGED_SELECTOR)

    def _watch_pods(self) -> None:
        from kubernetes.client import CoreV1Api

        core = CoreV1Api(self.api)
        kubelet = Kubelet(self.api, self.namespace)

        def complete(pod: Any) -> None:
            kubelet.terminate(pod, 0, self.message)
            with self.lock:
                self.finished[pod.metadata.labels[EXPERIMENT_LABEL]] = time.monotonic()

        def handle(kind: str, pod: Any) -> None:
            if kind == "ADDED" and not pod.status.container_statuses:
                self.pool.submit(complete, pod)

        self._watch(core.list_namespaced_pod, handle, label_selector=MANAGED_SELECTOR)

    def _watch_experiments(self) -> None:
        from kubernetes.client import CustomObjectsApi

        custom = CustomObjectsApi(self.api)

        def handle(kind: str, obj: dict[str, Any]) -> None:
            status = obj.get("status") or {}
            name = obj["metadata"]["name"]
            with self.lock:
                if status.get("phase") == "Succeeded" and status.get("results") and name not in self.results:
                    self.results[name] = time.monotonic()
                elif status.get("phase") in ("Failed", "Invalid"):
                    self.failed[name] = f"{status['phase']}: {status.get('message', '')}"

        def list_fn(namespace: str, **kw: Any) -> Any:
            return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kw)

        self._watch(list_fn, handle)

    def create(self, names: list[str], rate: float = 0.0) -> None:
        """Create `names` in order; `rate` > 0 paces them (per second), 0 creates them as a burst."""
        from kubernetes.client import CustomObjectsApi

        custom = CustomObjectsApi(self.api)
        start = time.monotonic()
        for i, name in enumerate(names):
            if rate > 0:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": SPEC}
            custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
            with self.lock:
                self.created[name] = time.monotonic()

    def wait_results(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(n in self.results or n in self.failed for n in names):
                    return True
            time.sleep(0.5)
        return False

    def latencies(self, names: list[str]) -> tuple[list[float], list[float]]:
        with self.lock:
            to_child = [self.child[n] - self.created[n] for n in names if n in self.child and n in self.created]
            to_results = [self.results[n] - self.finished[n] for n in names if n in self.results and n in self.finished]
        return to_child, to_results


def write_figures(figures: dict, path: Path | None) -> None:
    """Print the figures as JSON, and write them to `path` too when asked (both benchmarks)."""
    print(json.dumps(figures, indent=2))
    if path:
        path.write_text(json.dumps(figures, indent=2) + "\n")


@contextlib.contextmanager
def bench_namespace(cp: ControlPlane, proc: subprocess.Popen[bytes], user_agent: str | None = None) -> Iterator[Bench]:
    """A Bench watching namespace `bench` (created, with its default ServiceAccount, before the
    watches start); on leaving, the watches stop and so does the operator `proc`."""
    bench: Bench | None = None
    try:
        bench = Bench(cp, "bench")
        if user_agent:
            bench.api.user_agent = user_agent
        from kubernetes.client import CoreV1Api

        CoreV1Api(bench.api).create_namespace({"metadata": {"name": "bench"}})
        time.sleep(2)  # default ServiceAccount (pods are rejected without it)
        bench.start_watches()
        time.sleep(1)
        yield bench
    finally:
        if bench is not None:
            bench.stop.set()
        proc.terminate()
        proc.wait(15)


def start_operator(cp: ControlPlane, tmp: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """The real operator against `cp` (profile file and log in `tmp`), once it answers its
    liveness probe; returns the process and its environment (the metrics port is in it)."""
    profile = tmp / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    health = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cp.kubeconfig),
        operator_setting("metrics_port"): str(free_port()),
        operator_setting("profile_file"): str(profile),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "operator")]),
    }
    log = (tmp / "operator.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftbench_operator", "--quiet", f"--liveness=http://127.0.0.1:{health}/healthz"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=1)
            return proc, env
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit((tmp / "operator.log").read_text()) from None
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=200, help="burst whose latencies are measured")
    parser.add_argument("--rate", type=float, default=0.0, help="creations per second (0: one burst)")
    parser.add_argument("--total", type=int, default=1000, help="experiments alive when RSS is read")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ftbench-bench-") as tmp, ControlPlane() as cp:
        from kubernetes import config

        install_crd(config.new_client_from_config(str(cp.kubeconfig)), crd())
        proc, env = start_operator(cp, Path(tmp))
        with bench_namespace(cp, proc) as bench:
            burst = [f"exp-{i:04d}" for i in range(args.experiments)]
            cpu0 = {"operator": cpu_seconds(proc.pid), **{k: cpu_seconds(v) for k, v in cp.pids.items()}}
            cpu0["bench"] = time.process_time()
            t0 = time.monotonic()
            bench.create(burst, args.rate)
            create_seconds = time.monotonic() - t0
            ok = bench.wait_results(burst, timeout=300)
            burst_seconds = time.monotonic() - t0
            to_child, to_results = bench.latencies(burst)
            cpu = {"operator": cpu_seconds(proc.pid), **{k: cpu_seconds(v) for k, v in cp.pids.items()}}
            cpu["bench"] = time.process_time()
            cpu0.setdefault("bench", 0.0)
            handler_seconds = handler_means(env[operator_setting("metrics_port")])
            burst_cpu = {k: round(cpu[k] - cpu0[k], 1) for k in cpu}
            rest = [f"exp-{i:04d}" for i in range(args.experiments, args.total)]
            for start in range(0, len(rest), 100):
                bench.create(rest[start : start + 100])
                bench.wait_results(rest[start : start + 100], timeout=300)
            all_ok = bench.wait_results(burst + rest, timeout=300)
            time.sleep(3)
            rss = rss_mb(proc.pid)

    figures = {
        "experiments": args.experiments,
        "burst_create_seconds": round(create_seconds, 2),
        "burst_all_succeeded_seconds": round(burst_seconds, 2),
        "burst_complete": ok,
        "not_succeeded": len(bench.failed) if bench else None,
        "rate_per_second": args.rate or "burst",
        "burst_cpu_seconds": burst_cpu,
        "operator_handler_mean_seconds": handler_seconds,
        "cr_to_child_p50_s": round(statistics.median(to_child), 3),
        "cr_to_child_p99_s": round(pct(to_child, 99), 3),
        "pod_to_results_p50_s": round(statistics.median(to_results), 3),
        "pod_to_results_p99_s": round(pct(to_results, 99), 3),
        "total_experiments": args.total,
        "all_succeeded": all_ok,
        "operator_rss_mb": round(rss, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    write_figures(figures, args.json)
    print(
        f"\n| Measure | p50 | p99 | Target |\n|---|---|---|---|\n"
        f"| CR created -> child created ({args.experiments}, {'at once' if not args.rate else f'{args.rate:g}/s'}) | {figures['cr_to_child_p50_s']} s "
        f"| {figures['cr_to_child_p99_s']} s | p99 <= 1 s |\n"
        f"| pod finished -> results in status | {figures['pod_to_results_p50_s']} s "
        f"| {figures['pod_to_results_p99_s']} s | p99 <= 2 s |\n"
        f"| operator RSS with {args.total} experiments | {figures['operator_rss_mb']} MB | | <= 250 MB |"
    )


if __name__ == "__main__":
    main()
