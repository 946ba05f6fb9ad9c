"""The chart's Grafana dashboard, generated from the metric names the operator and the trainers serve.

One source: the panels below query only names from ftbench.contracts.operator_metrics and
ftbench.contracts.live_metrics, and each panel says which labels its series carry, so the Prometheus
test (tests/operator/test_prometheus.py) evaluates every query against a real Prometheus that
scraped the real operator and a training rank, and checks the labels. `python -m
ftbench.generated.dashboard --write` (hack/generate.sh) writes helm/ftbench/dashboards/; the chart
ships it as a ConfigMap with the label Grafana's dashboard sidecar picks up (values
metrics.grafanaDashboard, off by default).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftbench.contracts import live_metrics as live
from ftbench.contracts import operator_metrics as om
from ftbench.host.files import sync_generated

DASHBOARD_FILE = Path(__file__).resolve().parents[2] / "helm" / "ftbench" / "dashboards" / "ftbench-overview.json"
UID = "ftbench-overview"
RUN = ("namespace", "name")


def _result(field: str) -> str:
    return om.HEADLINE_RESULTS[field]


@dataclass(frozen=True)
class Panel:
    """One panel: its PromQL, the unit Grafana shows, and the labels every series it returns carries."""

    title: str
    expr: str
    labels: tuple[str, ...]
    unit: str = "short"
    legend: str = ""
    description: str = ""
    width: int = 12


PANELS: tuple[Panel, ...] = (
    Panel("Experiments by phase", f"sum by (phase) ({om.EXPERIMENTS})", ("phase",), legend="{{phase}}",
          description="FineTuneExperiments the operator sees, per phase."),
    Panel("Live tokens/s (while training)", f"max by (namespace, name) ({live.TOKENS_PER_SECOND.name})", RUN,
          legend="{{namespace}}/{{name}}",
          description="Padded training tokens/s so far, all ranks (the first rank of each node serves it; an "
          "estimate until the result's exact count)."),
    Panel("Live steady tokens/s interval (within run, +-%)",
          f"100 * max by (namespace, name) ({live.STEADY_CI95.name})", RUN, unit="percent",
          legend="{{namespace}}/{{name}}",
          description="Half-width of the steady-state tokens/s 95% interval so far, within this run only "
          "(targetPrecisionPercent stops the run when it is tight enough)."),
    Panel("Live progress", f"100 * max by (namespace, name) ({live.STEPS.name}) / max by (namespace, name) "
          f"({live.PLANNED_STEPS.name} > 0)", RUN, unit="percent", legend="{{namespace}}/{{name}}",
          description="Optimizer steps done of the steps the Trainer plans."),
    Panel("Final steady tokens/s", _result("steadyStateTokensPerSecond"), om.RESULT_LABELS,
          legend="{{namespace}}/{{name}}", description="status.results.steadyStateTokensPerSecond of succeeded runs."),
    Panel("Final tokens/s interval (+-%)", f"100 * {om.THROUGHPUT_CI95}", om.INTERVAL_LABELS, unit="percent",
          legend="{{namespace}}/{{name}} ({{scope}})",
          description="Half-width of the steady tokens/s 95% interval; scope says which kind of sure: withinRun "
          "(one run's steps: repeat to confirm) or acrossRepeats."),
    Panel("MFU", _result("mfuPercent"), om.RESULT_LABELS, unit="percent", legend="{{namespace}}/{{name}}",
          description="Model FLOPs utilisation of succeeded GPU runs (none on CPU runs)."),
    Panel("Peak tensor memory: measured", _result("gpuMaxMemoryAllocatedBytes"), om.RESULT_LABELS, unit="bytes",
          legend="{{namespace}}/{{name}}", description="torch.cuda.max_memory_allocated, largest over ranks."),
    Panel("Peak tensor memory: predicted (estimate)", _result("predictedPeakBytes"), om.RESULT_LABELS,
          unit="bytes", legend="{{namespace}}/{{name}}",
          description="The memory predictor's peak for the run's largest batch: compare with the measured one."),
    Panel("GPU memory peak (% of the card)", _result("gpuMemoryUtilizationPeakPercent"), om.RESULT_LABELS,
          unit="percent", legend="{{namespace}}/{{name}}", description="NVML's used / total at its highest."),
    Panel("Network peak bus bandwidth", om.NETWORK_PEAK, (*om.RESULT_LABELS, "backend", "transport"), unit="GBs",
          legend="{{namespace}}/{{name}} {{transport}}",
          description="The network preflight's largest busbw, with the transport NCCL or gloo used."),
    Panel("Sweep points by phase", f"sum by (namespace, sweep, phase) ({om.SWEEP_POINTS})",
          (*om.SWEEP_LABELS, "phase"), legend="{{sweep}} {{phase}}", description="Sweep progress."),
    Panel("Sweep device-hours", om.SWEEP_DEVICE_HOURS, (*om.SWEEP_LABELS, "kind"), legend="{{sweep}} {{kind}}",
          description="Device-hours spent and saved (kinds ending in Estimate are estimates)."),
    Panel("Operator: reconcile time p95",
          f"histogram_quantile(0.95, sum by (le, handler) (rate({om.RECONCILE_SECONDS}_bucket[5m])))", ("handler",),
          unit="s", legend="{{handler}}", description="Handler duration, 95th percentile over 5 minutes."),
    Panel("Operator: reconcile errors/s", f"sum(rate({om.RECONCILE_ERRORS}[5m])) or vector(0)", (),
          legend="errors/s", description="Handler failures per second (0 when none)."),
)  # fmt: skip


def _panel(index: int, panel: Panel) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": panel.width, "x": (index % 2) * 12, "y": (index // 2) * 8},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [{"refId": "A", "expr": panel.expr, "legendFormat": panel.legend or "__auto"}],
    }


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (schema 39), with a Prometheus data source variable."""
    return {
        "uid": UID,
        "title": "ftbench: fine-tuning benchmarks",
        "tags": ["ftbench"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "panels": [_panel(i, p) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench.generated.dashboard", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DASHBOARD_FILE.name}")
    args = parser.parse_args(argv)
    return sync_generated({DASHBOARD_FILE: render()}, check=not args.write,
                          regenerate="python -m ftbench.generated.dashboard --write")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
