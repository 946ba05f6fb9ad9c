"""How `ftbench predict` spreads a batch of plans over predictor processes (ftbench.local.predict.run_batch): plans
that may share a trace stay together, groups that share none spread over the cores a user lets it use, each on a
resident predictor of its own (a lane of ftbench.local.resident)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.env import FTBENCH_CACHE, FTBENCH_PREDICT_PROCESSES
from ftbench.contracts.plan import LaunchPlan
from ftbench.local import predict, resident

CATALOG, PROFILE = load_catalog(), ClusterProfile()
SPEC: dict[str, Any] = {"model": "llama3.2-1b", "engine": "trl", "gpuModel": "NVIDIA-A100-SXM4-80GB",
                        "modelMaxLength": 1024, "numberGpus": 2, "batchSize": 8}  # fmt: skip


def plan(**fields: Any) -> LaunchPlan:
    spec = FineTuneExperimentSpec.model_validate({**SPEC, **fields})
    return predict.prediction_plan(spec, "lanes", CATALOG, PROFILE)


def test_plans_that_differ_in_batch_or_sharded_gpus_share_a_group_and_others_do_not() -> None:
    plans = [
        plan(),
        plan(batchSize=32, numberGpus=8),  # the same FSDP2 step family: with the first
        plan(modelMaxLength=2048),  # another sequence: traces of its own
        plan(numberGpus=1),  # one GPU: no sharding, a step of its own
        plan(batchSize=4, numberGpus=1),
        plan(experiment="finetune_lora_benchmark-v1.0.0"),
    ]
    assert predict.grouped(plans) == [[0, 1], [3, 4], [2], [5]]


def test_the_cores_a_user_allows_bound_the_predictors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(predict.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7}, raising=False)
    assert predict.cores({}) == predict.MOST_PREDICTORS  # each holds torch: a few, not one per core
    monkeypatch.setattr(predict.os, "sched_getaffinity", lambda pid: {0}, raising=False)  # taskset -c 0
    assert predict.cores({}) == 1
    assert predict.cores({FTBENCH_PREDICT_PROCESSES: "3"}) == 3
    assert predict.cores({FTBENCH_PREDICT_PROCESSES: "many"}) == 1  # not a count: the cores decide


def test_each_lane_is_a_predictor_of_its_own_and_lane_zero_the_one_of_before() -> None:
    env = {FTBENCH_CACHE: "/tmp/ftb"}
    base = resident.socket_path(sys.executable, env, "/work")
    assert resident.socket_path(sys.executable, env, "/work", 0) == base
    lanes = {resident.socket_path(sys.executable, env, "/work", lane) for lane in (1, 2, 3)}
    assert base not in lanes and len(lanes) == 3
    assert {p.parent for p in lanes} == {base.parent}  # stop_all and settle_all reach them


def test_groups_are_dealt_whole_to_the_predictor_with_the_fewest_plans() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7], [8], [9]]  # grouped: the largest first
    assert predict.dealt(groups, 2) == [[0, 1, 2, 6, 7], [3, 4, 5, 8, 9]]
    assert predict.dealt(groups, 1) == [list(range(10))]
    assert predict.dealt([[0]], 4) == [[0]]  # no predictor without plans
