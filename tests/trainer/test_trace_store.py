"""The trace store (predict.trace_store): a kept trace gives the prediction the trace gave, and anything that
decides a trace (shape, FSDP shape, engine stack, ftbench's tracing code) names another one.

Issue 63's rule: a cache hit must be byte-for-byte the same prediction. Every field of MemoryPrediction is
compared but `seconds` (how long this call took).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from helpers import make_plan

from ftbench.contracts.env import FTBENCH_TRACE_CACHE
from ftbench.contracts.plan import LaunchPlan
from ftbench.contracts.prediction import MemoryPrediction
from ftbench_trainer.predict import trace_store
from ftbench_trainer.predict.model import CATALOG_ORIGIN, config_source, predict

A100 = "NVIDIA-A100-SXM4-80GB"


def _catalog_plan(tmp: Path, model: str, **spec: Any) -> LaunchPlan:
    """A 4-GPU plan of a catalog model whose weights are not here: its architecture comes from the catalog."""
    fields = {"numberGpus": 4, "gpuModel": A100, "torchDtype": "bfloat16", **spec}
    plan = make_plan(tmp, tmp / "absent", tmp, model=model, **fields)
    return plan.model_copy(update={"model": plan.model.model_copy(update={"ref": str(tmp / "absent")})})


def _wire(prediction: MemoryPrediction) -> dict[str, Any]:
    return prediction.model_dump(mode="json", by_alias=True, exclude={"seconds"})


@pytest.mark.parametrize("model", ["llama3.2-1b", "granite-3.0-1b-a400m-base"])
def test_a_kept_trace_is_the_same_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    plan = _catalog_plan(tmp_path, model, modelMaxLength=512, batchSize=8)
    assert config_source(plan)[0] == CATALOG_ORIGIN
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    uncached = predict(plan, count_rows=False)
    store = tmp_path / "traces"
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, str(store))
    first = predict(plan, count_rows=False)  # traced (or from this process's own cache), and kept
    assert len(list(store.glob("*.json"))) == 2  # the trace and its step family (trl's fused head: its GPU branch)
    loads = []
    real_load = trace_store.load
    monkeypatch.setattr(trace_store, "load", lambda name: loads.append(real_load(name)) or loads[-1])
    kept = predict(plan, count_rows=False)
    assert loads and loads[-1] is not None  # read from the store, not traced
    assert _wire(uncached) == _wire(first) == _wire(kept)


def _empty_store(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """A new trace store, with no family an earlier test's store left in this process's memory."""
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, str(tmp / "traces"))
    monkeypatch.setattr(trace_store, "_families", OrderedDict())


def _untraced(monkeypatch: pytest.MonkeyPatch, plan: LaunchPlan) -> dict[str, Any]:
    """The plan's prediction from what the store keeps: a trace made on the way fails the test."""
    from ftbench_trainer.predict import depth, trace

    depth._cache.clear()

    def no_trace(*args: Any) -> Any:
        raise AssertionError("traced, not answered by the family")

    monkeypatch.setattr(trace, "recorded_step", no_trace)
    return _wire(predict(plan, count_rows=False))


@pytest.mark.parametrize(("model", "seq"), [("llama3.2-1b", 512), ("granite-3.0-1b-a400m-base", 2048)])
def test_a_step_family_answers_another_batch_as_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, seq: int
) -> None:
    """Under trl's fused LM head too (this environment's engine): 2 rows of 512 tokens a device leave its tile buffer
    part full, 4 rows fill it; 2 rows of 2048 leave it 2 tokens short, 4 fill it. Each family answers 4 rows."""
    asked = _catalog_plan(tmp_path, model, modelMaxLength=seq, batchSize=16)
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    uncached = predict(asked, count_rows=False)
    _empty_store(monkeypatch, tmp_path)
    predict(_catalog_plan(tmp_path, model, modelMaxLength=seq, batchSize=8), count_rows=False)  # kept, with its family
    assert _untraced(monkeypatch, asked) == _wire(uncached)


def test_after_two_rows_a_resident_keeps_one_rows_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Answered as the resident predictor answers (`families_after`), a step of two rows per device under FSDP2
    leaves its family and the one-row step's waiting; once recorded, doubling the GPUs (one row) needs no trace."""
    from ftbench_trainer.predict import model

    doubled = _catalog_plan(tmp_path, "llama3.2-1b", modelMaxLength=512, batchSize=8, numberGpus=8)
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, "off")
    uncached = predict(doubled, count_rows=False)
    _empty_store(monkeypatch, tmp_path)
    with model.families_after():
        predict(_catalog_plan(tmp_path, "llama3.2-1b", modelMaxLength=512, batchSize=8), count_rows=False)
        assert len(model._pending) == 2  # the step's family, then one row's
        while model.record_waiting():
            pass
    assert _untraced(monkeypatch, doubled) == _wire(uncached)


def test_what_decides_a_trace_names_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ftbench_trainer.predict.model import traced_fsdp
    from ftbench_trainer.predict.plan_step import sharding, step_shape

    plan = _catalog_plan(tmp_path, "llama3.2-1b")
    source = config_source(plan)[1]
    assert source is not None
    shape, fsdp = step_shape(plan), traced_fsdp(sharding(plan))
    name = trace_store.key(source, shape, fsdp)
    assert trace_store.key(source, shape, fsdp) == name
    other_batch = step_shape(_catalog_plan(tmp_path, "llama3.2-1b", batchSize=8))
    assert trace_store.key(source, other_batch, fsdp) != name
    assert trace_store.key(source.replace("2048", "4096"), shape, fsdp) != name
    monkeypatch.setattr(trace_store, "installed", lambda package: "0.0.1" if package == "torch" else None)
    assert trace_store.key(source, shape, fsdp) != name
    monkeypatch.undo()
    trace_store.code_digest.cache_clear()
    monkeypatch.setattr(trace_store, "CODE", (*trace_store.CODE, "predict/model.py"))
    try:
        assert trace_store.key(source, shape, fsdp) != name
    finally:
        monkeypatch.undo()
        trace_store.code_digest.cache_clear()


def test_a_torn_file_is_traced_again_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plan = _catalog_plan(tmp_path, "llama3.2-1b", modelMaxLength=256)
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, str(tmp_path / "traces"))
    whole = predict(plan, count_rows=False)
    (kept,) = (p for p in (tmp_path / "traces").glob("*.json") if "phases" in json.loads(p.read_text()))
    kept.write_text(kept.read_text()[:40])
    again = predict(plan, count_rows=False)
    assert _wire(again) == _wire(whole)
    assert "traced again" in caplog.text
    assert json.loads(kept.read_text())["phases"]  # overwritten whole
