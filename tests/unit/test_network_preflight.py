"""The network preflight without a network: nccl-tests' formulas with hand-computed numbers, the time
budget, NCCL's debug settings, when the plan asks for it and the rule of run.requireRoce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.validation import validate_spec_dict
from ftbench.catalog import load_catalog
from ftbench.contracts import env as E
from ftbench.contracts.enums import Runtime
from ftbench.contracts.environment import COMMAND_LIMIT, RunEnvironment
from ftbench.contracts.network import NETWORK_DEVICE_LIMIT, Collective, NetworkInEffect, NetworkTransport
from ftbench.contracts.plan import ExperimentRef
from ftbench.contracts.results import TERMINATION_MESSAGE_LIMIT, Metrics, Outcome, TrainerResult
from ftbench.contracts.trainer_status import TrainerStatusReport
from ftbench.render.plan import PREFLIGHT_SIZES_CPU, PREFLIGHT_SIZES_GPU, build_plan
from ftbench_trainer.network.bandwidth import bus_factor, sample, timed_iterations
from ftbench_trainer.network.preflight import debug_file, nccl_debug_env, process_group_backend

OK = {"model": "llama3.1-8b", "modelMaxLength": 2048, "numberGpus": 8, "batchSize": 16, "gpuModel": "G"}


@pytest.mark.parametrize(
    ("collective", "ranks", "factor"),
    [
        (Collective.ALL_REDUCE, 2, 1.0),  # 2(n-1)/n
        (Collective.ALL_REDUCE, 8, 1.75),
        (Collective.ALL_REDUCE, 16, 1.875),
        (Collective.ALL_GATHER, 2, 0.5),  # (n-1)/n
        (Collective.ALL_GATHER, 8, 0.875),
        (Collective.ALL_REDUCE, 1, 0.0),  # one rank: nothing crosses a link
    ],
)
def test_bus_factor_is_nccl_tests(collective: Collective, ranks: int, factor: float) -> None:
    assert bus_factor(collective, ranks) == pytest.approx(factor)


def test_sample_figures() -> None:
    # 128 MiB all-reduce over 16 ranks in 5 ms: algbw 26.84 GB/s, busbw x 1.875 = 50.33 GB/s.
    s = sample(Collective.ALL_REDUCE, 128 << 20, 0.005, 16)
    assert s.alg_bandwidth_gbps == pytest.approx(26.84, rel=1e-3)
    assert s.bus_bandwidth_gbps == pytest.approx(50.33, rel=1e-3)
    # all-gather: S is the total size; 8 MiB in 4 ms over 2 ranks -> algbw 2.097, busbw half of it.
    g = sample(Collective.ALL_GATHER, 8 << 20, 0.004, 2)
    assert g.alg_bandwidth_gbps == pytest.approx(2.097, rel=1e-3) and g.bus_bandwidth_gbps == pytest.approx(
        1.049, rel=1e-3
    )
    assert sample(Collective.ALL_GATHER, 1024, 0.0, 2).alg_bandwidth_gbps == 0.0


def test_iterations_fit_the_budget() -> None:
    assert timed_iterations(10, 0.001, 5.0) == 10
    assert timed_iterations(10, 1.0, 3.5) == 3  # fewer where the budget requires
    assert timed_iterations(10, 2.0, 1.0) == 1  # at least one while any budget is left
    assert timed_iterations(10, 2.0, 0.0) == 0  # then the larger sizes are skipped


def test_nccl_debug_settings_add_to_the_pods(tmp_path: Path) -> None:
    assert nccl_debug_env({}, tmp_path) == {
        E.NCCL_DEBUG: "INFO",
        E.NCCL_DEBUG_SUBSYS: "INIT,NET",
        E.NCCL_DEBUG_FILE: str(tmp_path / "nccl-%p.log"),
    }
    # spec.run.ncclDebug's subsystems are kept and NET added; a pod's own file and TRACE are kept.
    pod = {E.NCCL_DEBUG: "TRACE", E.NCCL_DEBUG_SUBSYS: "INIT,BOOTSTRAP,ENV", E.NCCL_DEBUG_FILE: "/x/%h.%p"}
    assert nccl_debug_env(pod, tmp_path) == {E.NCCL_DEBUG_SUBSYS: "INIT,BOOTSTRAP,ENV,NET"}
    assert nccl_debug_env({E.NCCL_DEBUG: "WARN", E.NCCL_DEBUG_SUBSYS: "ALL"}, tmp_path)[E.NCCL_DEBUG] == "INFO"
    assert debug_file("/x/nccl-%h-%p.log", "node-1.cluster.local", 42) == Path("/x/nccl-node-1-42.log")


def test_the_group_is_the_one_accelerate_makes() -> None:
    assert process_group_backend(True, True, {}) == "gloo"
    assert process_group_backend(False, False, {}) == "gloo"
    assert process_group_backend(False, True, {}) == "nccl"
    fsdp_full = {"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}
    assert process_group_backend(False, True, fsdp_full) == "cuda:nccl,cpu:gloo"


def _plan(**overrides: Any):
    spec = FineTuneExperimentSpec.model_validate({**OK, **overrides})
    return build_plan(spec, load_catalog(), ClusterProfile(), ref=ExperimentRef(name="x"), runtime=Runtime.JOB)


@pytest.mark.parametrize(
    ("overrides", "runs"),
    [
        ({}, False),  # auto on one node
        ({"numberNodes": 2}, True),  # auto across nodes
        ({"numberNodes": 2, "run": {"networkPreflight": "off"}}, False),
        ({"run": {"networkPreflight": "on"}}, True),
        ({"numberGpus": 1, "batchSize": 4, "run": {"networkPreflight": "on"}}, False),  # one rank
    ],
)
def test_when_the_plan_runs_the_preflight(overrides: dict[str, Any], runs: bool) -> None:
    plan = _plan(**overrides)
    assert (plan.network_preflight is not None) == runs
    if plan.network_preflight is not None:
        assert plan.network_preflight.sizes_bytes == PREFLIGHT_SIZES_GPU


def test_cpu_ranks_run_smaller_sizes() -> None:
    plan = _plan(device="cpu", numberGpus=2, batchSize=4, run={"networkPreflight": "on"})
    assert plan.network_preflight is not None and plan.network_preflight.sizes_bytes == PREFLIGHT_SIZES_CPU


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({"numberNodes": 2, "enableRoce": True, "run": {"requireRoce": True}}, False),
        ({"run": {"requireRoce": True}}, True),  # one node, no RoCE
        ({"numberNodes": 2, "run": {"requireRoce": True}}, True),  # enableRoce false
        ({"numberNodes": 2, "enableRoce": True, "run": {"requireRoce": True, "networkPreflight": "off"}}, True),
    ],
)
def test_require_roce_rule(overrides: dict[str, Any], refused: bool) -> None:
    issues = [i for i in validate_spec_dict({**OK, **overrides}).issues if i.rule == "run.require-roce"]
    assert bool(issues) == refused
    if refused:
        assert "requireRoce" in issues[0].message and issues[0].path == "spec.run.requireRoce"


def test_require_roce_reaches_the_plan() -> None:
    plan = _plan(numberNodes=2, enableRoce=True, run={"requireRoce": True})
    assert plan.network_preflight is not None and plan.network_preflight.require_roce


def test_a_full_result_with_the_network_fits_the_termination_message() -> None:
    """The per-size figures go after the metrics' lists when 4 KiB are short; the peak and transport stay."""
    samples = [sample(c, size, 0.01, 16) for c in Collective for size in PREFLIGHT_SIZES_GPU]
    network = NetworkInEffect(
        backend="nccl",
        transport=NetworkTransport.IB,
        link_layer="RoCE",
        rdma=True,
        gpu_direct_rdma=True,
        devices=[f"mlx5_{i}:1/RoCE" for i in range(NETWORK_DEVICE_LIMIT)],
        ranks=16,
        warmup_iterations=2,
        iterations=10,
        seconds=3.2,
        bandwidth=samples,
        peak_bus_bandwidth_gbps=max(s.bus_bandwidth_gbps for s in samples),
    )
    metrics = Metrics.model_validate(
        {
            "trainRuntimeSeconds": 1.0, "trainSteps": 1, "trainSamples": 1, "trainTokens": 1,
            "trainNonPaddingTokens": 1, "trainSamplesPerSecond": 1.0, "trainStepsPerSecond": 1.0,
            "trainTokensPerSecond": 1.0, "trainTokensPerGpuPerSecond": 1.0, "datasetTokensPerSecond": 1.0,
            "datasetTokensPerSecondPerGpu": 1.0, "lossCurve": [1.23456] * 16,
            "cpuTensorPeakBytes": 10**12, "predictedPeakBytes": 10**12, "predictionErrorPercent": -12.3,
            "rankMemory": [{"rank": r, "parameterBytes": 10**10, "gradientBytes": 10**10, "optimizerStateBytes": 10**10}
                           for r in range(16)],
        }
    )  # fmt: skip
    kubeflow = TrainerStatusReport(url="https://" + "u" * 600, sent=3, failures=9, last_error="e" * 600)
    env = RunEnvironment(
        engine="fms-hf-tuning",
        command="x" * COMMAND_LIMIT,
        network=network,
        kubeflow_trainer_status=kubeflow,
        attention_implementation="flash_attention_2",
        packing="flashVarlen",
    )
    result = TrainerResult(outcome=Outcome.SUCCEEDED, metrics=metrics, environment=env)
    text = result.to_termination_message()
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    kept_metrics = TrainerResult.from_json(text).metrics
    assert kept_metrics is not None and kept_metrics.prediction_error_percent == -12.3
    kept = TrainerResult.from_json(text).environment
    assert kept is not None and kept.network is not None
    assert kept.network.peak_bus_bandwidth_gbps == network.peak_bus_bandwidth_gbps and kept.network.link_layer == "RoCE"
    small = TrainerResult(outcome=Outcome.SUCCEEDED, environment=RunEnvironment(engine="trl", network=network))
    assert TrainerResult.from_json(small.to_termination_message()) == small  # whole when it fits
