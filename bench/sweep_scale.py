"""A 200-point FineTuneSweep on the local control plane (not a test: prints a markdown table).

    python bench/sweep_scale.py [--points 200] [--parallelism 20]

Starts etcd + kube-apiserver (with an audit log) + kube-controller-manager, installs the CRDs,
runs the real operator and the kubelet stand-in of `operator_latency.py` (it completes every
training pod the moment the Job controller creates it, with a real trainer result), and creates
one sweep of `--points` points (batchSize x maxSteps, OOM pruning off, so only `parallelism`
bounds it). Measured, with one monotonic clock in this process, polling the sweep's status:

- *all points scheduled*: sweep created -> `status.counts.pending` reaches 0 (every point has
  its child experiment), and -> phase Succeeded;
- the most points `Running` at once (the parallelism bound, which must hold);
- operator RSS (VmRSS) at the end;
- API requests per point: the kube-apiserver's audit log (level Metadata, one entry per request at
  ResponseComplete), counting the requests whose user agent is the operator's (kopf's own client,
  `kopf/...`, and the `kubernetes` client, `OpenAPI-Generator/...`; the benchmark's client says
  `ftbench-bench`, the controller-manager names itself), from the sweep's creation to its end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator"), str(REPO / "bench")]

from operator_latency import SPEC, bench_namespace, cpu_seconds, rss_mb, start_operator, write_figures  # noqa: E402

from ftbench.api.crd import crd, sweep_crd  # noqa: E402
from ftbench.api.resource import API_VERSION, GROUP, SWEEP_KIND, SWEEP_PLURAL, VERSION  # noqa: E402
from ftbench_devcluster import ControlPlane  # noqa: E402
from ftbench_devcluster.crds import install_crd  # noqa: E402

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
"""
OPERATOR_AGENTS = ("kopf/", "OpenAPI-Generator/")
BENCH_AGENT = "ftbench-bench"


def sweep_body(points: int, parallelism: int) -> dict[str, Any]:
    """`points` valid points: batchSize 1..k x maxSteps 10, 20, ... (k * 10 = points)."""
    template = {k: v for k, v in SPEC.items() if k != "batchSize"}
    steps = [10 * (i + 1) for i in range(10)]
    sizes = list(range(1, points // len(steps) + 1))
    spec = {
        "template": template,
        "matrix": {"batchSize": sizes, "maxSteps": steps},
        "parallelism": parallelism,
        "oomPruning": False,
    }
    return {"apiVersion": API_VERSION, "kind": SWEEP_KIND, "metadata": {"name": "scale"}, "spec": spec}


def operator_requests(audit_log: Path, since: str, until: str) -> Counter[str]:
    """The operator's requests between two audit timestamps, by `verb resource[/subresource]`."""
    found: Counter[str] = Counter()
    for line in audit_log.read_text().splitlines():
        entry = json.loads(line)
        agent = entry.get("userAgent", "")
        if not agent.startswith(OPERATOR_AGENTS) or not since <= entry["requestReceivedTimestamp"] <= until:
            continue
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", entry.get("requestURI", "?"))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        found[f"{entry['verb']} {resource}"] += 1
    return found


def audit_now() -> str:
    """An audit-log timestamp for now (RFC 3339 with microseconds, UTC), comparable as text."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() % 1 * 1e6):06d}Z"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200, help="points (a multiple of 10)")
    parser.add_argument("--parallelism", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from kubernetes import config
    from kubernetes.client import CustomObjectsApi

    with tempfile.TemporaryDirectory(prefix="ftbench-sweep-bench-") as tmp:
        policy, audit_log = Path(tmp) / "audit-policy.yaml", Path(tmp) / "audit.log"
        policy.write_text(AUDIT_POLICY)
        flags = [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}"]
        with ControlPlane(apiserver_args=flags) as cp:
            api = config.new_client_from_config(str(cp.kubeconfig))
            install_crd(api, crd())
            install_crd(api, sweep_crd())
            proc, _ = start_operator(cp, Path(tmp))
            with bench_namespace(cp, proc, BENCH_AGENT) as bench:
                custom = CustomObjectsApi(bench.api)
                cpu0 = cpu_seconds(proc.pid)
                since = audit_now()
                t0 = time.monotonic()
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, "bench", SWEEP_PLURAL, sweep_body(args.points, args.parallelism)
                )
                scheduled = done = None
                most_running = 0
                status: dict[str, Any] = {}
                while time.monotonic() - t0 < args.timeout:
                    sweep = custom.get_namespaced_custom_object(GROUP, VERSION, "bench", SWEEP_PLURAL, "scale")
                    status = sweep.get("status") or {}
                    counts = status.get("counts") or {}
                    most_running = max(most_running, counts.get("running", 0))
                    if scheduled is None and counts.get("total") and counts.get("pending") == 0:
                        scheduled = time.monotonic() - t0
                    if status.get("phase") in ("Succeeded", "Failed", "Invalid"):
                        done = time.monotonic() - t0
                        break
                    time.sleep(0.2)
                until = audit_now()
                cpu = cpu_seconds(proc.pid) - cpu0
                time.sleep(2)
                rss = rss_mb(proc.pid)
            requests = operator_requests(audit_log, since, until)

    total = sum(requests.values())
    figures = {
        "points": args.points,
        "parallelism": args.parallelism,
        "phase": status.get("phase"),
        "progress": status.get("progress"),
        "all_scheduled_seconds": round(scheduled, 1) if scheduled is not None else None,
        "succeeded_seconds": round(done, 1) if done is not None else None,
        "most_running": most_running,
        "operator_cpu_seconds": round(cpu, 1),
        "operator_rss_mb": round(rss, 1),
        "operator_requests": total,
        "operator_requests_per_point": round(total / args.points, 1),
        "operator_requests_by_kind": dict(requests.most_common()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    write_figures(figures, args.json)
    print(
        f"\n| Measure | Value |\n|---|---|\n"
        f"| sweep created -> every point scheduled ({args.points} points, parallelism {args.parallelism}) "
        f"| {figures['all_scheduled_seconds']} s |\n"
        f"| sweep created -> Succeeded | {figures['succeeded_seconds']} s |\n"
        f"| most points Running at once | {most_running} |\n"
        f"| operator API requests per point (audit log) | {figures['operator_requests_per_point']} |\n"
        f"| operator CPU during the sweep | {figures['operator_cpu_seconds']} s |\n"
        f"| operator RSS at the end | {figures['operator_rss_mb']} MB |"
    )


if __name__ == "__main__":
    main()
