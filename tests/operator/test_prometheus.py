"""The chart's Grafana dashboard against a real Prometheus (issue 48): every query returns series with the
labels its panel names.

Debian's `prometheus` scrapes the real operator (its metrics port) and a real training run while it
trains: two CPU ranks of the tiny model with the network preflight and `metricsPort`, the port the
chart's trainer PodMonitor scrapes. The live panels are evaluated while the ranks train. What the run
measured then reaches the operator the way a pod's result does (its termination message, the test
playing the kubelet), beside a recorded H100 result (bench/results/gpu-h100-2026-11-26) for the GPU-only
panels a CPU machine cannot produce, and a sweep of that result for the sweep panels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_testkit import Kubelet, lora_spec, wait_for
from test_sweeps import Sweeps, grid

from ftbench.contracts.labels import EXPERIMENT_LABEL
from ftbench.contracts.results import TrainerResult
from ftbench.engines.envs import package_path
from ftbench.generated.dashboard import PANELS, Panel
from ftbench.host.ports import free_port

REPO = Path(__file__).resolve().parents[2]
H100_RESULT = REPO / "bench" / "results" / "gpu-h100-2026-11-26" / "call3" / "lora.json"
LIVE = [p for p in PANELS if "ftbench_trainer_" in p.expr]
FINAL = [p for p in PANELS if p not in LIVE]

pytestmark = [pytest.mark.training, pytest.mark.k8s]


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("FTBENCH_REQUIRE_PROMETHEUS"):
            pytest.fail("prometheus is not installed (hack/test.sh installs Debian's package as root)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return found


class Prometheus:
    """A Prometheus server scraping fixed targets every second, and its query API."""

    def __init__(self, workdir: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for job, port in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        argv = [prometheus_binary(), f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"]  # fmt: skip
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self._get("/-/ready") is not None, 60, what="prometheus ready")

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as answer:
                return answer.read()
        except OSError:
            return None

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body is not None, f"query failed: {expr}"
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


def answers(prometheus: Prometheus, panel: Panel) -> list[dict[str, Any]] | None:
    """The panel's series when there are some and each carries the panel's labels, else None."""
    series = prometheus.query(panel.expr)
    ok = series and all(set(panel.labels) <= set(s["metric"]) for s in series)
    return series if ok else None


def check_panels(prometheus: Prometheus, panels: list[Panel], timeout: float) -> None:
    missing: list[str] = []

    def all_answer() -> bool:
        missing[:] = [p.title for p in panels if answers(prometheus, p) is None]
        return not missing

    try:
        wait_for(all_answer, timeout, what="every panel's query to return labelled series")
    except AssertionError as err:
        raise AssertionError(f"{err}; still empty or unlabelled: {missing}") from err


def test_every_dashboard_query_returns_labelled_series_from_the_operator_and_a_training_run(
    operator: Any, kube_api: Any, namespace: str, create_experiment: Any, tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    from ftbench_trainer.tiny_model import build_tiny_model
    from tests.trainer.helpers import OFFLINE_ENV, two_processes_one_node, write_plan

    # A real two-rank CPU run that serves its live metrics and runs the network preflight.
    model = build_tiny_model(tmp_path / "tiny-model")
    trainer_port = free_port()
    plan = two_processes_one_node(tmp_path, model, tmp_path / "data", maxSteps=100000, stopAfterSeconds=30.0,
                                  warmupSteps=2, run={"networkPreflight": "on"})  # fmt: skip
    ref = plan.experiment_ref.model_copy(update={"namespace": namespace, "name": "live"})
    plan = plan.model_copy(
        update={"experiment_ref": ref, "output": plan.output.model_copy(update={"metrics_port": trainer_port})}
    )
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": package_path()}
    cmd = [sys.executable, "-m", "ftbench_trainer.main", "--plan", str(write_plan(plan, tmp_path))]
    trainer = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    prometheus = Prometheus(tmp_path, {"ftbench-operator": operator.metrics_port, "ftbench-trainers": trainer_port})
    try:
        # The live panels, while the ranks train.
        check_panels(prometheus, LIVE, timeout=120)
        assert trainer.poll() is None, "the run ended before its live panels were checked"
        out = trainer.communicate(timeout=300)[0]
        assert trainer.returncode == 0, out[-3000:]
        measured = TrainerResult.from_json(Path(plan.output.result_file).read_text())
        assert measured.environment is not None and measured.environment.network is not None

        kubelet = Kubelet(kube_api, namespace)
        recorded = TrainerResult.from_json(H100_RESULT.read_text())
        for name, result in (("gpu", recorded), ("cpu", measured)):
            create_experiment(lora_spec(), name=name)
            [pod] = kubelet.wait_pods(1, selector=f"{EXPERIMENT_LABEL}={name}")
            kubelet.run(pod)
            kubelet.finish(pod, result)
            kubelet.wait_phase(name, "Succeeded")
        sweeps = Sweeps(kube_api, namespace)
        sweeps.create(grid("grid", matrix={"batchSize": [4], "modelMaxLength": [1024]}))
        sweeps.drive("grid", lambda point, pod: recorded)

        check_panels(prometheus, FINAL, timeout=60)
        final = {p.title: answers(prometheus, p) or [] for p in FINAL}
        scopes = {s["metric"]["scope"] for s in final["Final tokens/s interval (+-%)"]}
        assert scopes == {"withinRun"}
        transports = {s["metric"].get("name"): s["metric"]["backend"] for s in final["Network peak bus bandwidth"]}
        assert transports.get("cpu") == "gloo"
        assert {s["metric"]["kind"] for s in final["Sweep device-hours"]} >= {"spent", "withFixedStopsEstimate"}
    finally:
        if trainer.poll() is None:
            trainer.kill()
        prometheus.close()
