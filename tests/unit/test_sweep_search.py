"""spec.search in a FineTuneSweep (issue 61): validated, planned from what was observed, resumed without a repeat."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ftbench.api.prediction_report import PREDICTED_OOM_REASON
from ftbench.api.sweep import FineTuneSweepSpec, PointPhase, SweepPhase
from ftbench.catalog import load_catalog
from ftbench.contracts.outcomes import Phase
from ftbench.sweep.points import expand
from ftbench.sweep.schedule import RunState, plan_sweep
from tests.unit.test_sweep import TEMPLATE, created, done, oom, running

MATRIX = {"numberGpus": [1, 2, 4, 8], "batchSize": [8, 16], "modelMaxLength": [1024, 2048]}  # 16 points


def search_sweep(**search: Any) -> FineTuneSweepSpec:
    objective = {"metric": "trainTokensPerGpuPerSecond"}
    fields = {"template": TEMPLATE, "matrix": MATRIX, "search": search, "parallelism": 2, "objective": objective}
    return FineTuneSweepSpec.model_validate(fields)


def test_an_objective_it_cannot_predict_is_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match=r"set objective\.metric to one of .*or remove spec\.search"):
        FineTuneSweepSpec.model_validate({"template": TEMPLATE, "search": {}, "objective": {"metric": "stepTimeCv"}})


def test_every_point_has_a_prediction_and_the_best_predicted_go_first() -> None:
    spec = search_sweep(fraction=0.25)
    points = expand(spec, load_catalog()).points
    assert all(p.predicted_tokens_per_second and p.predicted_band for p in points)
    plan = plan_sweep(spec, points, [])
    per_gpu = {p.index: p.predicted_tokens_per_second / p.spec.number_gpus for p in points}  # type: ignore[operator, union-attr]
    best_two = sorted(per_gpu, key=lambda i: -per_gpu[i])[:2]
    assert sorted(i for i, _ in created(plan)) == sorted(best_two)
    assert plan.phase == SweepPhase.PENDING and plan.counts.pending == 16


def test_the_search_stops_at_its_budget_and_says_why_the_rest_was_not_measured() -> None:
    spec = search_sweep(fraction=0.25)  # 4 of 16
    points = expand(spec, load_catalog()).points
    runs = []
    for _ in range(10):
        plan = plan_sweep(spec, points, runs)
        if not plan.to_create:
            break
        runs += [done(i, r, tokens=1000.0 + i) for i, r in created(plan)]
    assert len({r.point for r in runs}) == 4
    assert plan.phase == SweepPhase.SUCCEEDED and plan.counts.skipped == 12
    skipped = [row for row in plan.rows if row.phase == PointPhase.SKIPPED]
    assert all(row.message.startswith("search: not measured, ") for row in skipped)
    assert plan.best is not None and plan.best.point in {r.point for r in runs}


def test_a_resumed_search_repeats_no_trial() -> None:
    """The operator restarted: the same observations give the same decisions, and nothing chosen runs twice."""
    spec = search_sweep(trials=3)
    points = expand(spec, load_catalog()).points
    first = plan_sweep(spec, points, [])
    a, b = (i for i, _ in created(first))
    observed = [done(a, tokens=500.0), oom(b)]  # one measured, one out of memory: both count, neither is retried
    again = plan_sweep(spec, points, observed)
    (c,) = {i for i, _ in created(again)}
    assert c not in (a, b) and created(plan_sweep(spec, points, observed)) == created(again)
    final = plan_sweep(spec, points, [*observed, done(c, tokens=400.0)])
    assert not final.to_create and final.counts.skipped == 13 and final.phase == SweepPhase.SUCCEEDED


def test_nothing_is_skipped_while_a_chosen_point_still_runs() -> None:
    spec = search_sweep(trials=1)
    points = expand(spec, load_catalog()).points
    (a,) = {i for i, _ in created(plan_sweep(spec, points, []))}
    plan = plan_sweep(spec, points, [running(a)])
    assert not plan.to_create and plan.counts.skipped == 0 and plan.phase == SweepPhase.RUNNING


def test_points_without_a_prediction_are_measured_in_point_order() -> None:
    cpu = {k: v for k, v in TEMPLATE.items() if k != "gpuModel"}
    cpu |= {"numberGpus": 0, "model": "ftbench-tiny-llama", "torchDtype": "float32", "modelMaxLength": 256}
    spec = FineTuneSweepSpec.model_validate(
        {"template": cpu, "matrix": {"batchSize": [1, 2, 4, 8]}, "search": {"fraction": 0.5}}
    )
    points = expand(spec, load_catalog()).points
    assert len(points) == 4 and all(p.valid and p.predicted_tokens_per_second is None for p in points)
    first = plan_sweep(spec, points, [])
    assert created(first) == [(0, 0)]
    assert created(plan_sweep(spec, points, [done(0)])) == [(1, 0)]
    final = plan_sweep(spec, points, [done(0), done(1)])
    assert final.counts.skipped == 2 and final.phase == SweepPhase.SUCCEEDED


def test_a_device_hour_budget_stops_the_search_once_spent() -> None:
    """search.gpuHours: no point starts once the runs have spent it (test_sweep.metrics: 1 s of runtime per run)."""
    spec = search_sweep(fraction=1.0, gpuHours=0.0001).model_copy(update={"parallelism": 1})  # < one run's time
    points = expand(spec, load_catalog()).points
    (a,) = {i for i, _ in created(plan_sweep(spec, points, []))}  # nothing spent yet: the first trial starts
    final = plan_sweep(spec, points, [done(a, tokens=100.0)])
    assert not final.to_create and final.counts.skipped == 15 and final.phase == SweepPhase.SUCCEEDED
    assert all(
        "device-hours is spent" in r.message or "below the best measured" in r.message
        for r in final.rows
        if r.phase == PointPhase.SKIPPED
    )


def test_a_point_refused_as_a_predicted_oom_costs_no_trial() -> None:
    """The operator's precheck refused the chosen point before launch: the search takes the next, budget intact."""
    spec = search_sweep(trials=1).model_copy(update={"parallelism": 1})
    points = expand(spec, load_catalog()).points
    (a,) = {i for i, _ in created(plan_sweep(spec, points, []))}
    refused = RunState(f"c{a}-0", a, 0, Phase.INVALID, PREDICTED_OOM_REASON, "predicted 90 GiB of 80")
    (b,) = {i for i, _ in created(plan_sweep(spec, points, [refused]))}
    assert b != a
