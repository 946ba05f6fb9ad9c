"""ProgressReporter against a local HTTP server: request shape, throttling, failures ignored."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_stub import ApiStub, serving

from ftbench_trainer.progress_reporter import ApiEndpoint, ProgressReporter, progress_body


@pytest.fixture
def server() -> Iterator[tuple[str, type[ApiStub]]]:
    with serving() as (url, handler):
        yield url, handler


def sent(handler: type[ApiStub]) -> list[dict[str, Any]]:
    """The PATCH bodies the stub received, parsed."""
    return [{**r, "body": json.loads(r["body"])} for r in handler.seen]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_report_patches_only_status_progress(server):
    url, handler = server
    reporter = ProgressReporter("ns", "exp", ApiEndpoint(url, token="tok"), trial=2)
    assert reporter.report(5, 20, 1234.5, 30.0)
    assert reporter.flush(5)
    (req,) = sent(handler)
    assert req["path"] == "/apis/ftbench.io/v1alpha1/namespaces/ns/finetuneexperiments/exp/status"
    assert req["headers"]["Content-Type"] == "application/merge-patch+json"
    assert req["headers"]["Authorization"] == "Bearer tok"
    assert list(req["body"]) == ["status"] and list(req["body"]["status"]) == ["progress"]
    progress = req["body"]["status"]["progress"]
    assert progress["step"] == 5 and progress["totalSteps"] == 20 and progress["percent"] == 25.0
    assert progress["tokensPerSecond"] == 1234.5 and progress["etaSeconds"] == 30.0 and progress["trial"] == 2
    reporter.close()


def test_throttled_to_one_report_per_interval_except_final(server):
    url, handler = server
    clock = FakeClock()
    reporter = ProgressReporter("ns", "exp", ApiEndpoint(url, token="t"), clock=clock, min_interval_seconds=10)
    assert reporter.report(1, 10, 1.0)
    assert not reporter.report(2, 10, 1.0)
    clock.now += 10
    assert reporter.report(3, 10, 1.0)
    assert reporter.report(10, 10, 1.0, 0.0, final=True)
    reporter.close(5)
    steps = [r["body"]["status"]["progress"]["step"] for r in sent(handler)]
    assert steps[-1] == 10 and 2 not in steps


def test_failures_never_raise(server):
    url, handler = server
    handler.status = 403
    reporter = ProgressReporter("ns", "exp", ApiEndpoint(url, token="t"))
    assert reporter.report(1, 10, 1.0)
    reporter.flush(5)
    assert reporter.failures == 1 and "403" in (reporter.last_error or "")
    unreachable = ProgressReporter("ns", "exp", ApiEndpoint("http://127.0.0.1:9", token="t"), timeout_seconds=1)
    assert unreachable.report(1, 10, 1.0)
    unreachable.close(5)
    assert unreachable.failures == 1


def test_progress_body_bounds():
    from datetime import UTC, datetime

    body = progress_body(-1, 0, -5.0, -3.0, None, datetime(2026, 1, 1, tzinfo=UTC))
    assert body == {
        "step": 0,
        "totalSteps": 0,
        "percent": 0.0,
        "tokensPerSecond": 0.0,
        "etaSeconds": 0.0,
        "lastUpdateTime": "2026-01-01T00:00:00Z",
    }
    assert progress_body(30, 20, 1, None, None, datetime.now(UTC))["percent"] == 100.0


def test_from_plan_needs_cluster_and_flag(tmp_path: Path):
    from types import SimpleNamespace

    plan = SimpleNamespace(
        output=SimpleNamespace(report_progress_to_kubernetes=True, progress_interval_seconds=10.0),
        experiment_ref=SimpleNamespace(name="exp", namespace="ns"),
    )
    assert ProgressReporter.from_plan(plan, {}) is None  # not in a cluster
    (tmp_path / "token").write_text("abc\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", "FTBENCH_TRIAL_INDEX": "3"}
    endpoint = ApiEndpoint.in_cluster(env, sa_dir=tmp_path)
    assert endpoint is not None and endpoint.server == "https://10.0.0.1:443" and endpoint.bearer() == "abc"
    plan.output.report_progress_to_kubernetes = False
    assert ProgressReporter.from_plan(plan, env) is None


def test_import_is_light():
    import subprocess

    code = "import sys, ftbench_trainer.progress_reporter; print(any(m in sys.modules for m in ('kopf', 'torch', 'kubernetes')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
