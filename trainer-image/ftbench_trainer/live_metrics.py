"""Serve this rank's live training metrics for Prometheus while it trains (ftbench.contracts.live_metrics).

A daemon thread answers `GET /metrics` with the latest update the measuring callback gave; serving never
touches training (the callback only swaps one reference), and a port that cannot be bound (taken by
another process on the node) is logged and skipped: a benchmark is not failed for its dashboard.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ftbench.contracts.live_metrics import CONTENT_TYPE, METRICS_PATH, exposition
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.progress import ProgressUpdate

log = logging.getLogger(__name__)


class LiveMetricsServer:
    """The latest update, served; `update` is the ProgressSink protocol."""

    def __init__(self, port: int, labels: dict[str, str], host: str = "") -> None:
        self.labels = labels
        self.latest: ProgressUpdate | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != METRICS_PATH:
                    self.send_error(404)
                    return
                body = exposition(server.latest, server.labels).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # a scrape every 15 s is not news in the training log

        self.http = ThreadingHTTPServer((host, port), Handler)
        self.http.daemon_threads = True
        self.port = int(self.http.server_address[1])
        threading.Thread(target=self.http.serve_forever, name="ftbench-live-metrics", daemon=True).start()

    @classmethod
    def from_plan(cls, plan: LaunchPlan, rank: int) -> LiveMetricsServer | None:
        """The server the plan asks for (plan.output.metricsPort; None: off), or None when the port is taken."""
        port = plan.output.metrics_port
        if port is None:
            return None
        labels = {
            "namespace": plan.experiment_ref.namespace,
            "name": plan.experiment_ref.name,
            "experiment": plan.experiment.value,
            "model": plan.model.name,
            "engine": plan.engine.value,
            "attempt": str(plan.experiment_ref.attempt),
            "rank": str(rank),
        }
        try:
            return cls(port, labels)
        except OSError as err:  # another rank or process on this node has the port
            log.warning("live metrics not served on port %d: %s", port, err)
            return None

    def update(self, progress: ProgressUpdate) -> None:
        self.latest = progress

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
