"""A prediction that fails says whose failure it is (issue 62): a model the engine's stack cannot trace is one
line (PredictionError, HTTP 422), a defect in ftbench's own code keeps its traceback (raised as itself; the
predictor service logs it and answers 500 "ftbench failed")."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import make_plan

from ftbench.contracts.env import FTBENCH_TRACE_CACHE
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import PREDICT_PATH
from ftbench_trainer.predict import depth, serve
from ftbench_trainer.predict.model import PredictionError, predict, raised_by_ftbench


@pytest.fixture
def plan(tmp_path: Path, tiny_model_dir: Path) -> LaunchPlan:
    return make_plan(tmp_path, tiny_model_dir, tmp_path)


def test_a_defect_of_ftbench_is_not_called_an_untraceable_model(
    plan: LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    depth._cache.clear()
    monkeypatch.setattr(depth, "BASE_LAYERS", "three")  # ftbench's own arithmetic fails inside depth.py
    with pytest.raises(TypeError) as raised:
        predict(plan, count_rows=False)
    assert raised_by_ftbench(raised.value) and not isinstance(raised.value, PredictionError)


def test_what_the_stack_refuses_is_one_line(plan: LaunchPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def refuse(*args: object, **kwargs: object) -> None:
        torch.empty(-1)  # raised inside torch, as a layer the stack cannot run would

    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    depth._cache.clear()
    monkeypatch.setattr("ftbench_trainer.predict.trace._run_steps", refuse)
    with pytest.raises(PredictionError, match="cannot predict a llama model in this environment"):
        predict(plan, count_rows=False)


@pytest.fixture
def service() -> Iterator[str]:
    server = serve.serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}{PREDICT_PATH}"
    server.shutdown()


def _post(url: str, plan: LaunchPlan) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=plan.to_json().encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_service_answers_500_and_logs_the_traceback_of_a_defect(
    plan: LaunchPlan, service: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(plan: LaunchPlan) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(serve, "predict", broken)
    with caplog.at_level(logging.ERROR, logger="ftbench_trainer.predict.serve"):
        code, body = _post(service, plan)
    assert code == 500 and body["error"].startswith(serve.FAILED) and "KeyError" in body["error"]
    (record,) = [r for r in caplog.records if r.name == "ftbench_trainer.predict.serve"]
    assert record.exc_info is not None and "Traceback" in caplog.text


def test_the_service_answers_422_for_a_plan_it_cannot_predict(
    plan: LaunchPlan, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot(plan: LaunchPlan) -> None:
        raise PredictionError("cannot read the config of model x")

    monkeypatch.setattr(serve, "predict", cannot)
    code, body = _post(service, plan)
    assert code == 422 and body["error"] == "cannot read the config of model x"
