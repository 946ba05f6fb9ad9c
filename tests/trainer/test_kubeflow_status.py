"""Rank 0 reports progress and headline metrics to Kubeflow Trainer's TrainJob status endpoint.

Against a stand-in endpoint (tests/kubeflow_endpoint.py) that checks each request as upstream's
server and the API server behind it would: HTTPS verified with the injected CA, the bearer token
from the injected file, the path of the TrainJob, and the body against the v2.3.0 CRD's
`trainerStatus` schema. The last tests run the real trainer (trl and the newest fms-hf-tuning
release) inside such an environment.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import NEWEST_FMS, make_plan, read_result, run_trainer, tail, write_plan

from ftbench.contracts import env as E
from ftbench.contracts import trainer_status as T
from ftbench.contracts.enums import Engine
from ftbench.contracts.progress import MEMORY_CPU_RSS, ProgressUpdate
from ftbench.contracts.results import EXIT_OK, Outcome
from ftbench_trainer.kubeflow_status import KubeflowStatusReporter
from tests.kubeflow_endpoint import NAME, NAMESPACE, TOKEN, request_errors, stand_in_endpoint

PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
NOW = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)


def metrics_of(body: dict) -> dict[str, str]:
    return {m["name"]: m["value"] for m in body["trainerStatus"].get("metrics", [])}


def test_a_request_is_what_the_upstream_schema_accepts() -> None:
    """Values are clamped into the CRD's bounds, metrics are strings, unknown ones left out, and
    the time is RFC 3339 in UTC: a stray value can never make the server refuse an update."""
    body = T.status_request(
        percent=180.0,
        eta_seconds=1e12,
        metrics={T.LOSS: 2.345678912, T.CURRENT_STEP: 3, T.TOKENS_PER_SECOND: 1234.5, T.STEP_TIME: None},
        now=NOW,
    ).to_wire()
    assert request_errors(body) == []
    status = body["trainerStatus"]
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == T.INT32_MAX
    assert status["lastUpdatedTime"] == "2026-11-25T12:00:00Z"
    assert metrics_of(body) == {"loss": "2.34568", "current_step": "3", "tokens_per_second": "1234.5"}
    assert request_errors({"trainerStatus": {"progressPercentage": 101}})  # the stand-in really checks
    assert request_errors({"trainerStatus": {"lastUpdatedTime": "2026-01-01T00:00:00Z", "extra": 1}})
    assert T.status_path(NAMESPACE, NAME) == f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NAMESPACE}/trainjobs/{NAME}/status"  # fmt: skip


def _update(step: int, total: int = 4) -> ProgressUpdate:
    return ProgressUpdate(step, total, 2.0 * step, 500.0, 2.0 * (total - step), loss=1.5, step_time_seconds=2.0,
                          peak_memory_bytes=123_456_789, memory_kind=MEMORY_CPU_RSS)  # fmt: skip


def test_updates_reach_the_endpoint_verified_and_authenticated(tmp_path: Path) -> None:
    with stand_in_endpoint(tmp_path / "endpoint") as endpoint:
        environ = dict(endpoint.env())
        reporter = KubeflowStatusReporter.from_environ(environ)
        assert reporter is not None and reporter.min_interval == T.MIN_INTERVAL_SECONDS
        # transformers' own KubeflowCallback is switched off: one reporter per TrainJob.
        assert environ[E.DISABLE_KUBEFLOW_INTEGRATION] == "TRUE"
        reporter.update(_update(4, 4))
        reporter.update(_update(4, 4))  # within 5 s of the last: throttled
        reporter.close()
    (got,) = endpoint.requests
    assert got.answer == 200 and got.errors == [] and got.authorization == f"Bearer {TOKEN}"
    assert got.path == T.status_path(NAMESPACE, NAME) and got.content_type == "application/json"
    status = got.body["trainerStatus"]
    assert status["progressPercentage"] == 99  # 100 % only once the result is known
    assert metrics_of(got.body) == {
        "loss": "1.5",
        "tokens_per_second": "500",
        "step_time_seconds": "2",
        "current_step": "4",
        "total_steps": "4",
        "cpu_peak_rss_bytes": "123456789",
    }
    assert reporter.report() == T.TrainerStatusReport(url=endpoint.url, sent=1)


def test_no_endpoint_or_a_user_opt_out_means_no_reporter() -> None:
    assert KubeflowStatusReporter.from_environ({}) is None
    opted_out = {E.KUBEFLOW_TRAINER_SERVER_URL: "https://x/s", E.DISABLE_KUBEFLOW_INTEGRATION: "true"}
    assert KubeflowStatusReporter.from_environ(opted_out) is None


def test_a_refused_token_or_an_unreachable_endpoint_is_counted_never_raised(tmp_path: Path) -> None:
    with stand_in_endpoint(tmp_path / "endpoint") as endpoint:
        endpoint.token_file.write_text("someone-elses-token")
        reporter = KubeflowStatusReporter.from_environ(dict(endpoint.env()))
        assert reporter is not None
        reporter.update(_update(1))
        reporter.close()
    assert [r.answer for r in endpoint.requests] == [403]
    assert reporter.failures == 1 and "403" in (reporter.last_error or "")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = KubeflowStatusReporter(f"https://127.0.0.1:{port}/status", token_file=tmp_path / "none", ca_file=None)
    gone.update(_update(1))
    gone.close()
    report = gone.report()
    assert report.sent == 0 and report.failures == 1 and report.last_error


@pytest.mark.training
@pytest.mark.slow
@pytest.mark.parametrize("engine", [Engine.TRL, Engine.FMS_HF_TUNING], ids=["trl", f"fms-{NEWEST_FMS}"])
def test_the_real_trainer_posts_schema_valid_trainer_status(
    tmp_path: Path, tiny_model_dir: Path, engine: Engine, request: pytest.FixtureRequest
) -> None:
    """A real run inside a TrainJob-like environment: every update is valid and authenticated, all
    come from ftbench (transformers' callback stays silent: its updates carry no tokens/s), the
    last says 100 % with the measured tokens/s of the result, and the result records the updates."""
    if engine == Engine.FMS_HF_TUNING:  # the trainer builds the tiny model in that environment
        python, model_dir = request.getfixturevalue("fms_python"), tmp_path / "model"
        spec: dict[str, object] = {"engine": "fms-hf-tuning", "fmsHfTuningVersion": NEWEST_FMS}
    else:
        python, model_dir, spec = PYTHON, tiny_model_dir, {}
    plan = make_plan(tmp_path, model_dir, tmp_path / "data", maxSteps=3, **spec)  # type: ignore[arg-type]
    with stand_in_endpoint(tmp_path / "endpoint") as endpoint:
        proc = run_trainer(python, write_plan(plan, tmp_path), env=endpoint.env())
    assert proc.returncode == EXIT_OK, tail(proc)
    result = read_result(plan)
    assert result.outcome == Outcome.SUCCEEDED and result.metrics is not None and result.environment is not None
    got = endpoint.requests
    assert len(got) >= 2, tail(proc)
    assert all(r.answer == 200 and not r.errors for r in got), [(r.answer, r.errors) for r in got]
    assert all(T.TOKENS_PER_SECOND in metrics_of(r.body) for r in got)  # none from transformers' callback
    last = got[-1].body
    assert last["trainerStatus"]["progressPercentage"] == 100
    assert last["trainerStatus"]["estimatedRemainingSeconds"] == 0
    final = metrics_of(last)
    assert float(final[T.TOKENS_PER_SECOND]) == pytest.approx(result.metrics.train_tokens_per_second, rel=1e-5)
    assert final[T.CURRENT_STEP] == "3" and int(final[T.CPU_PEAK_MEMORY]) > 0
    losses = result.metrics.loss_curve  # the last logged loss, where the engine logged one
    assert final.get(T.LOSS) == (T.metric_value(losses[-1]) if losses else None)
    assert all(r.body["trainerStatus"]["progressPercentage"] <= 99 for r in got[:-1])
    assert result.environment.kubeflow_trainer_status == T.TrainerStatusReport(url=endpoint.url, sent=len(got))
    assert os.environ.get(E.DISABLE_KUBEFLOW_INTEGRATION) is None  # the test process is untouched


@pytest.mark.training
@pytest.mark.slow
def test_an_unreachable_endpoint_does_not_fail_the_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", maxSteps=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "token").write_text(TOKEN)
    env = {
        E.KUBEFLOW_TRAINER_SERVER_URL: f"https://127.0.0.1:{port}{T.status_path(NAMESPACE, NAME)}",
        E.KUBEFLOW_TRAINER_SERVER_TOKEN: str(tmp_path / "token"),
    }
    proc = run_trainer(PYTHON, write_plan(plan, tmp_path), env=env)
    assert proc.returncode == EXIT_OK, tail(proc)
    result = read_result(plan)
    assert result.outcome == Outcome.SUCCEEDED and result.environment is not None
    report = result.environment.kubeflow_trainer_status
    assert report is not None and report.sent == 0 and report.failures >= 1 and "refused" in report.last_error.lower()
