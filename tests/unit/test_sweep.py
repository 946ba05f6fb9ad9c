"""The pure sweep core: expansion, the OOM frontier, the planner and the status it builds."""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftbench.api.prediction_report import PREDICTED_OOM_REASON
from ftbench.api.sweep import (
    MAX_POINTS,
    OBJECTIVE_METRICS,
    FineTuneSweepSpec,
    FineTuneSweepStatus,
    PointPhase,
    SweepPhase,
)
from ftbench.catalog import load_catalog
from ftbench.contracts.labels import DNS_LABEL_MAX
from ftbench.contracts.network import NetworkInEffect, NetworkTransport
from ftbench.contracts.outcomes import Phase
from ftbench.contracts.results import Metrics
from ftbench.render.names import sweep_child_name
from ftbench.sweep.frontier import memory_order, needs_at_least
from ftbench.sweep.points import expand, parse_sweep_document
from ftbench.sweep.schedule import OOM_REASON, ReuseCandidate, RunState, plan_sweep, reuse_key
from ftbench.sweep.status import invalid_status, sweep_status

CATALOG = load_catalog()
TEMPLATE = {
    "experiment": "finetune_lora_benchmark-v1.0.0",
    "model": "llama3.1-8b",
    "numberGpus": 1,
    "gpuModel": "NVIDIA-A100-SXM4-80GB",
}


def sweep(**fields: Any) -> FineTuneSweepSpec:
    raw = {"template": TEMPLATE, "matrix": {"batchSize": [2, 4], "modelMaxLength": [512, 1024]}, **fields}
    return FineTuneSweepSpec.model_validate(raw)


def metrics(tokens: float, p50: float = 1.0, mfu: float = 10.0, peak: float = 50.0) -> Metrics:
    return Metrics(
        train_runtime_seconds=1, train_steps=1, train_samples=1, train_tokens=1, train_non_padding_tokens=1,
        train_samples_per_second=1, train_steps_per_second=1, train_tokens_per_second=tokens,
        train_tokens_per_gpu_per_second=tokens, dataset_tokens_per_second=tokens / 2,
        dataset_tokens_per_second_per_gpu=tokens / 2, step_time_p50_seconds=p50, mfu_percent=mfu,
        gpu_memory_utilization_peak_percent=peak,
    )  # fmt: skip


def done(point: int, repeat: int = 0, tokens: float = 100.0, **kw: Any) -> RunState:
    return RunState(f"c{point}-{repeat}", point, repeat, Phase.SUCCEEDED, "ResultsRecorded", "", metrics(tokens, **kw))


def oom(point: int, repeat: int = 0) -> RunState:
    return RunState(f"c{point}-{repeat}", point, repeat, Phase.INVALID, OOM_REASON, "CUDA out of memory")


def running(point: int, repeat: int = 0) -> RunState:
    return RunState(f"c{point}-{repeat}", point, repeat, Phase.RUNNING)


def created(plan) -> list[tuple[int, int]]:
    return [(n.point.index, n.repeat) for n in plan.to_create]


# ---- expansion ----


def test_product_in_matrix_order_with_values_of_the_varied_fields() -> None:
    points = expand(sweep(), CATALOG).points
    assert [dict(p.values) for p in points] == [
        {"batchSize": 2, "modelMaxLength": 512},
        {"batchSize": 2, "modelMaxLength": 1024},
        {"batchSize": 4, "modelMaxLength": 512},
        {"batchSize": 4, "modelMaxLength": 1024},
    ]
    assert all(p.valid and p.spec is not None for p in points)
    assert points[3].wire == {**TEMPLATE, "batchSize": 4, "modelMaxLength": 1024}


def test_exclude_before_include_and_include_adds_new_fields() -> None:
    spec = sweep(
        exclude=[{"batchSize": 4, "modelMaxLength": 1024}],
        include=[{"batchSize": 8, "modelMaxLength": 512, "r": 8}, {"batchSize": 2, "modelMaxLength": 512}],
    )
    points = expand(spec, CATALOG).points
    assert [(p.values["batchSize"], p.values["modelMaxLength"], p.values["r"]) for p in points] == [
        (2, 512, None),
        (2, 1024, None),
        (4, 512, None),
        (8, 512, 8),  # the second include equals point 0: it adds nothing
    ]


def test_run_settings_vary_with_a_dotted_key() -> None:
    points = expand(sweep(matrix={"batchSize": [2], "modelMaxLength": [512], "run.queueName": ["a", "b"]}), CATALOG)
    assert [p.wire["run"] for p in points.points] == [{"queueName": "a"}, {"queueName": "b"}]


def test_invalid_point_is_kept_with_its_reason() -> None:
    points = expand(sweep(matrix={"batchSize": [1, 4], "modelMaxLength": [512], "numberGpus": [2]}), CATALOG).points
    assert [p.valid for p in points] == [False, True]  # batch 1 does not split over 2 GPUs
    assert "spec.batchSize" in str(points[0].issues[0])


def test_a_network_check_is_not_a_sweep_point() -> None:
    """networkPreflight only trains nothing: in a sweep that point is invalid with the reason; on runs it."""
    matrix = {"batchSize": [4], "modelMaxLength": [512], "numberGpus": [2], "run.networkPreflight": ["on", "only"]}
    on, only = expand(sweep(matrix=matrix), CATALOG).points
    assert on.valid and not only.valid
    assert [i.rule for i in only.issues] == ["sweep.network-check-only"] and "FineTuneExperiment" in str(only.issues[0])


@pytest.mark.parametrize(
    ("fields", "path", "rule"),
    [
        ({"matrix": {"bogus": [1]}}, "spec.matrix.bogus", "sweep.field"),
        ({"template": {**TEMPLATE, "batchsize": 2}}, "spec.template.batchsize", "sweep.field"),
        ({"exclude": [{"numberGpus": 1}]}, "spec.exclude[0].numberGpus", "sweep.exclude"),
        ({"include": [{}]}, "spec.include[0]", "sweep.include"),
        ({"matrix": {"batchSize": []}}, "spec.matrix.batchSize", "sweep.matrix"),
        (
            {"matrix": {"batchSize": list(range(1, 31)), "modelMaxLength": list(range(1, 31))}},
            "spec.matrix",
            "sweep.size",
        ),
        ({"exclude": [{"batchSize": 2}, {"batchSize": 4}]}, "spec.exclude", "sweep.empty"),
    ],
)
def test_structural_issues_name_the_field(fields: dict[str, Any], path: str, rule: str) -> None:
    expansion = expand(sweep(**fields), CATALOG)
    assert not expansion.points and (path, rule) in [(i.path, i.rule) for i in expansion.issues]


def test_too_many_points_is_refused_before_the_product_is_built() -> None:
    spec = sweep(matrix={"batchSize": list(range(1, 101)), "modelMaxLength": list(range(1, 101)), "r": [1, 2]})
    assert str(MAX_POINTS) in str(expand(spec, CATALOG).issues[0])


def test_document_header_and_types_are_checked() -> None:
    parsed = parse_sweep_document({"apiVersion": "v1", "kind": "FineTuneSweep", "spec": {"repeats": 0}})
    paths = {i.path for i in parsed.issues}
    assert {"apiVersion", "metadata.name", "spec.repeats"} <= paths and parsed.spec is None


# ---- frontier ----


def test_needs_at_least_only_within_everything_else_equal() -> None:
    spec = sweep(matrix={"batchSize": [2, 4], "modelMaxLength": [512, 1024], "r": [4, 8]})
    points = expand(spec, CATALOG).points
    by = {(p.values["batchSize"], p.values["modelMaxLength"], p.values["r"]): p for p in points}
    assert needs_at_least(by[(4, 1024, 4)], by[(2, 512, 4)])
    assert needs_at_least(by[(2, 1024, 4)], by[(2, 512, 4)])
    assert not needs_at_least(by[(2, 512, 4)], by[(4, 512, 4)])
    assert not needs_at_least(by[(4, 512, 4)], by[(2, 1024, 4)])  # incomparable
    assert not needs_at_least(by[(4, 1024, 8)], by[(2, 512, 4)])  # another LoRA rank: not comparable
    assert not needs_at_least(by[(2, 512, 4)], by[(2, 512, 4)])


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True),
    lengths=st.lists(st.integers(64, 4096), min_size=1, max_size=4, unique=True),
)
def test_memory_order_extends_the_partial_order(batches: list[int], lengths: list[int]) -> None:
    points = expand(sweep(matrix={"batchSize": batches, "modelMaxLength": lengths}), CATALOG).points
    order = [p.index for p in memory_order(points)]
    for upper in points:
        for lower in points:
            if needs_at_least(upper, lower):
                assert order.index(lower.index) < order.index(upper.index)


# ---- planner ----


def test_start_respects_parallelism_without_pruning() -> None:
    points = expand(sweep(parallelism=2, oom_pruning=False), CATALOG).points
    first = plan_sweep(sweep(parallelism=2, oom_pruning=False), points, [])
    assert created(first) == [(0, 0), (1, 0)] and first.phase == SweepPhase.PENDING  # memory order
    later = plan_sweep(sweep(parallelism=2, oom_pruning=False), points, [done(0), running(1)])
    assert created(later) == [(2, 0)] and later.phase == SweepPhase.RUNNING


def test_pruning_waits_for_the_points_below_then_skips_above_an_oom() -> None:
    spec = sweep(parallelism=4)
    points = expand(spec, CATALOG).points
    assert created(plan_sweep(spec, points, [])) == [(0, 0)]  # everything else is above point 0
    plan = plan_sweep(spec, points, [oom(0)])
    assert created(plan) == [] and plan.phase == SweepPhase.SUCCEEDED
    assert [r.phase for r in plan.rows] == [PointPhase.GPU_OOM, *[PointPhase.SKIPPED] * 3]
    assert plan.rows[3].message == "predicted OOM from point 0 (batchSize=2, modelMaxLength=512)"
    assert [r.is_valid for r in plan.rows] == [False] * 4
    assert plan.counts.gpu_oom == 1 and plan.counts.skipped == 3 and plan.progress == "4/4"


def test_oom_in_the_middle_prunes_only_what_is_above_it() -> None:
    spec = sweep(parallelism=4)
    points = expand(spec, CATALOG).points
    plan = plan_sweep(spec, points, [done(0), oom(1)])  # (2, 1024) OOM; (4, 512) is not above it
    assert created(plan) == [(2, 0)]
    assert plan.rows[3].phase == PointPhase.SKIPPED and plan.rows[2].phase == PointPhase.PENDING


def test_repeats_and_their_spread() -> None:
    spec = sweep(matrix={"batchSize": [2], "modelMaxLength": [512]}, repeats=3, parallelism=3)
    points = expand(spec, CATALOG).points
    assert created(plan_sweep(spec, points, [])) == [(0, 0), (0, 1), (0, 2)]
    partial = plan_sweep(spec, points, [done(0, 0, p50=1.0)])
    assert partial.rows[0].phase == PointPhase.RUNNING and created(partial) == [(0, 1), (0, 2)]
    runs = [done(0, 0, 90.0, p50=1.0), done(0, 1, 100.0, p50=1.2), done(0, 2, 110.0, p50=0.8)]
    row = plan_sweep(spec, points, runs).rows[0]
    assert row.phase == PointPhase.SUCCEEDED and row.repeats_done == 3
    assert row.train_tokens_per_second == pytest.approx(100.0)
    assert row.step_time_cv_across_repeats == pytest.approx(0.2)
    assert row.experiments == ["c0-0", "c0-1", "c0-2"]


def test_a_points_network_preflight_is_its_transports_and_mean_peak() -> None:
    spec = sweep(matrix={"batchSize": [2, 4], "modelMaxLength": [512]}, repeats=3, parallelism=6)
    points = expand(spec, CATALOG).points

    def net(transport: str, peak: float, link_layer: str = "") -> NetworkInEffect:
        return NetworkInEffect(backend="nccl", transport=NetworkTransport(transport), link_layer=link_layer, ranks=2,
                               warmup_iterations=2, iterations=10, seconds=1.0, peak_bus_bandwidth_gbps=peak)  # fmt: skip

    runs = [replace(done(0, 0), network=net("ib", 40.0, "RoCE")), replace(done(0, 1), network=net("socket", 10.0)),
            replace(done(0, 2), network=net("ib", 40.0, "RoCE")), done(1, 0), done(1, 1), done(1, 2)]  # fmt: skip
    rows = plan_sweep(spec, points, runs).rows
    assert (rows[0].transport, rows[0].peak_bus_bandwidth_gbps) == ("ib (RoCE), socket", pytest.approx(30.0))
    assert (rows[1].transport, rows[1].peak_bus_bandwidth_gbps) == (None, None)  # no preflight (one rank)
    assert rows[0].to_wire()["peakBusBandwidthGbps"] == pytest.approx(30.0)


def test_the_best_point_carries_its_interval_and_the_points_within_its_noise() -> None:
    spec = sweep(matrix={"batchSize": [2, 4, 8], "modelMaxLength": [512]}, repeats=2, parallelism=6)
    points = expand(spec, CATALOG).points
    # point 0: 100 +- a lot; point 1: 104, 106 (best); point 2: 80, 81 (clearly behind)
    runs = [
        done(0, 0, 90.0),
        done(0, 1, 110.0),
        done(1, 0, 104.0),
        done(1, 1, 106.0),
        done(2, 0, 80.0),
        done(2, 1, 81.0),
    ]
    plan = plan_sweep(spec, points, runs)
    half = 12.706 * statistics.stdev([104.0, 106.0]) / 2**0.5
    assert plan.rows[1].objective_ci95_low == pytest.approx(105.0 - half)
    assert plan.best is not None and plan.best.point == 1
    assert (plan.best.ci95_low, plan.best.ci95_high) == (
        plan.rows[1].objective_ci95_low,
        plan.rows[1].objective_ci95_high,
    )
    assert plan.best.within_noise_of == [0]  # 90..110 overlaps; 80..81 does not
    assert "(within noise of point 0)" in plan.message


def test_one_repeat_uses_the_runs_own_interval_for_rates_only() -> None:
    spec = sweep(matrix={"batchSize": [2, 4], "modelMaxLength": [512]}, parallelism=2)
    points = expand(spec, CATALOG).points
    runs = [done(0, 0, 100.0), done(1, 0, 103.0)]
    runs = [RunState(r.name, r.point, r.repeat, r.phase, r.reason, r.message,
                     metrics(r.metrics.train_tokens_per_second).model_copy(update={"throughput_ci95_relative": 0.02}))
            for r in runs if r.metrics]  # fmt: skip
    plan = plan_sweep(spec, points, runs)
    assert (plan.rows[0].objective_ci95_low, plan.rows[0].objective_ci95_high) == pytest.approx((98.0, 102.0))
    assert plan.best is not None and plan.best.point == 1 and plan.best.within_noise_of == [0]
    by_step_time = sweep(matrix=spec.matrix, objective={"metric": "stepTimeP50Seconds", "direction": "min"})
    rows = plan_sweep(by_step_time, points, runs).rows
    assert rows[0].objective_ci95_low is None  # a step time has no per-run interval of its own here


def test_a_failed_repeat_fails_the_point_and_the_sweep() -> None:
    spec = sweep(matrix={"batchSize": [2], "modelMaxLength": [512]})
    failed = RunState("c0-0", 0, 0, Phase.FAILED, "TrainingError", "boom")
    plan = plan_sweep(spec, expand(spec, CATALOG).points, [failed])
    assert plan.rows[0].phase == PointPhase.FAILED and plan.phase == SweepPhase.FAILED
    assert "boom" in plan.rows[0].message and "some points failed" in plan.message


def test_best_by_objective_max_and_min() -> None:
    points = expand(sweep(oom_pruning=False), CATALOG).points
    runs = [done(0, tokens=10), done(1, tokens=40), done(2, tokens=30), done(3, tokens=20)]
    assert plan_sweep(sweep(oom_pruning=False), points, runs).best.point == 1  # type: ignore[union-attr]
    low = sweep(oom_pruning=False, objective={"metric": "trainTokensPerSecond", "direction": "min"})
    best = plan_sweep(low, points, runs).best
    assert best is not None and best.point == 0 and best.value == 10


def test_reuse_takes_the_earlier_result_and_counts_it() -> None:
    spec = sweep(reuse=True, oom_pruning=False)
    points = expand(spec, CATALOG).points
    plan = plan_sweep(spec, points, [], {0: ReuseCandidate("older", metrics(77.0))})
    assert plan.rows[0].phase == PointPhase.REUSED and plan.rows[0].experiments == ["older"]
    assert plan.rows[0].train_tokens_per_second == 77.0 and (0, 0) not in created(plan)
    assert plan.counts.reused == 1


def test_device_hours_add_up_what_ran_and_estimate_what_was_saved() -> None:
    """Point 0 ran (1 GPU: 36 s set-up + 3564 s of steps = 1 device-hour, its precision target saving
    half an hour more), point 1 ran out of memory (no result: not counted), so point 3 above it was
    pruned (about the sweep's 36 s set-up per device); a reused result saved its own hour."""
    spec = sweep(parallelism=4)
    points = expand(spec, CATALOG).points
    ran = metrics(100.0).model_copy(
        update={"devices": 1, "setup_seconds": 36.0, "train_runtime_seconds": 3564.0, "measured_seconds": 1800.0,
                "measured_steps": 100, "train_steps": 100, "train_steps_planned": 200, "stopped_by": "precisionTarget"}
    )  # fmt: skip
    first = RunState("c0-0", 0, 0, Phase.SUCCEEDED, "ResultsRecorded", "", ran)
    plan = plan_sweep(spec, points, [first, oom(1)])
    hours = plan.device_hours
    assert hours is not None and [r.phase for r in plan.rows][2:] == [PointPhase.PENDING, PointPhase.SKIPPED]
    assert (hours.spent, hours.runs_without_result) == (pytest.approx(1.0), 1)
    assert hours.saved_by_early_stops_estimate == pytest.approx(100 * 18.0 / 3600)  # 100 steps left x 18 s
    assert hours.saved_by_skips_estimate == pytest.approx(36.0 / 3600)
    assert hours.with_fixed_stops_estimate == pytest.approx(1.0 + 0.5 + 0.01)
    reused = plan_sweep(sweep(reuse=True, oom_pruning=False), points, [], {0: ReuseCandidate("older", ran)})
    assert reused.device_hours is not None and reused.device_hours.saved_by_reuse == pytest.approx(1.0)
    FineTuneSweepStatus.model_validate({"deviceHours": hours.to_wire()})  # the CRD's shape


def test_reuse_key_sees_defaults_and_the_image() -> None:
    a, b = (expand(sweep(), CATALOG).points[0].spec for _ in range(2))
    assert a is not None and b is not None
    written = a.model_validate({**a.to_wire(), "gradientAccumulationSteps": 4})  # the default, written out
    assert reuse_key(a, "img:1") == reuse_key(written, "img:1") != reuse_key(b, "img:2")


def test_same_observations_same_decisions() -> None:
    """What makes an operator restart safe: the planner keeps no state."""
    spec = sweep(parallelism=2, oom_pruning=False)
    points = expand(spec, CATALOG).points
    runs = [done(0), running(2)]
    assert plan_sweep(spec, points, runs) == plan_sweep(spec, points, list(reversed(runs)))


# ---- status ----


def test_status_conditions_keep_their_transition_time() -> None:
    spec = sweep(parallelism=4)
    points = expand(spec, CATALOG).points
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    first = sweep_status(plan_sweep(spec, points, [running(0)]), generation=1, previous=None, now=t0, started=True)
    assert first.phase == SweepPhase.RUNNING and first.start_time == t0 and first.completion_time is None
    later = t0 + timedelta(minutes=5)
    final = sweep_status(plan_sweep(spec, points, [oom(0)]), generation=1, previous=first, now=later, started=True)
    conditions = {c.type: c for c in final.conditions}
    assert conditions["Valid"].last_transition_time == t0
    assert conditions["Complete"].status == "True" and conditions["Complete"].last_transition_time == later
    assert final.completion_time == later and final.progress == "4/4" and len(final.points) == 4


def test_invalid_status_says_why() -> None:
    expansion = expand(sweep(matrix={"bogus": [1]}), CATALOG)
    status = invalid_status(expansion.issues, generation=2, previous=None, now=datetime.now(UTC))
    assert status.phase == SweepPhase.INVALID and "spec.matrix.bogus" in (status.message or "")
    assert status.conditions[0].reason == "InvalidSweep" and status.observed_generation == 2


def test_child_names_are_dns_labels_and_unique() -> None:
    names = {sweep_child_name("s" * 80, p, r) for p in range(50) for r in range(3)}
    assert len(names) == 150 and all(len(n) <= DNS_LABEL_MAX for n in names)
    assert sweep_child_name("quick", 3, 1) == "quick-p3-r1"


@pytest.mark.parametrize("metric", OBJECTIVE_METRICS)
def test_every_objective_metric_picks_a_best_point(metric: str) -> None:
    """Every value spec.objective.metric accepts is read from the children's results."""
    spec = sweep(oom_pruning=False, objective={"metric": metric, "direction": "max"})
    points = expand(spec, CATALOG).points
    runs = [done(p) for p in range(4)]
    field = next(name for name, info in Metrics.model_fields.items() if info.alias == metric)
    runs[2] = RunState("c2-0", 2, 0, Phase.SUCCEEDED, "", "", metrics(100.0).model_copy(update={field: 1e9}))
    best = plan_sweep(spec, points, runs).best
    assert best is not None and best.point == 2 and best.metric == metric and best.value == 1e9


def test_a_point_refused_for_a_predicted_oom_is_skipped_not_launched() -> None:
    """Its experiment ended Invalid (PredictedOOM) before any pod: the point is Skipped with the numbers."""
    spec = sweep(parallelism=4, oomPruning=False)
    points = expand(spec, CATALOG).points
    message = "predicted 95.1 GiB per GPU (...) of 80.0 GiB on NVIDIA-A100-SXM4-80GB: does not fit (predicted OOM)"
    refused = RunState("c3-0", 3, 0, Phase.INVALID, PREDICTED_OOM_REASON, message)
    plan = plan_sweep(spec, points, [done(0), done(1), done(2), refused])
    row = plan.rows[3]
    assert row.phase == PointPhase.SKIPPED and row.is_valid is False
    assert row.message.startswith("not launched: predicted") and "predicted OOM" in row.message
    assert plan.counts.skipped == 1 and plan.phase == SweepPhase.SUCCEEDED


def test_a_sweep_whose_every_point_is_invalid_is_refused_as_a_whole() -> None:
    """Issue 45: it validated (exit 0) and `ftbench sweep` ended 'Succeeded: 2/2 points finished (2 invalid)'."""
    spec = FineTuneSweepSpec.model_validate({
        "template": {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama",
                     "modelMaxLength": 512, "numberGpus": 2, "gpuModel": "NVIDIA-A100-SXM4-80GB"},
        "matrix": {"batchSize": [1, 3]},
    })  # fmt: skip
    expansion = expand(spec, load_catalog())
    assert not expansion.points and [i.rule for i in expansion.issues] == ["sweep.no-runnable-point"]
    assert "batchSize 1 is not divisible by numberGpus 2" in expansion.issues[0].message
    runnable = spec.model_copy(update={"matrix": {"batchSize": [1, 2]}})
    assert [p.valid for p in expand(runnable, load_catalog()).points] == [False, True]  # one bad point is a measurement


def test_a_point_that_ran_before_validation_refused_it_keeps_what_it_measured() -> None:
    """The lent GPUs' stores hold 1-GPU FSDP points that ran before applied.backend-one-process
    refused them: a report of such a store shows their figures with today's reason, never runs them
    again, and a sweep no point of which passes today is still reported (expand(ran=True))."""
    spec = FineTuneSweepSpec.model_validate(
        {
            "template": TEMPLATE | {"distributedBackend": "FSDP", "batchSize": 2},
            "matrix": {"modelMaxLength": [512, 1024]},
            "repeats": 2,
        }
    )
    assert [i.rule for i in expand(spec, CATALOG).issues] == ["sweep.no-runnable-point"]
    points = expand(spec, CATALOG, ran=True).points
    assert [p.valid for p in points] == [False, False]
    plan = plan_sweep(spec, points, [done(0), done(0, 1), done(1)])
    assert not plan.to_create  # point 1's second repeat would be refused
    first, second = plan.rows
    assert first.phase == PointPhase.SUCCEEDED and first.train_tokens_per_second == 100.0
    assert first.message.startswith("ran before validation refused it (") and "backend-one-process" in first.message
    assert second.phase == PointPhase.INVALID and "backend-one-process" in second.message
