"""The throughput prediction (ftbench.predict.throughput): parameter counts against the traced modules, the
fitted constants against their fit, the fleet table against its tabulation, run time and sweep cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.catalog.parameters import parameter_counts
from ftbench.predict import constants
from ftbench.predict import throughput as tp
from ftbench.sweep.cost import sweep_cost
from ftbench.sweep.points import SweepPoint

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import fleet_throughput  # noqa: E402

CATALOG = load_catalog()
GPU: dict[str, Any] = {"model": "llama3.1-8b", "numberGpus": 8, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 16,
                       "modelMaxLength": 2048, "maxSteps": 100}  # fmt: skip


def spec(**fields: Any) -> FineTuneExperimentSpec:
    return FineTuneExperimentSpec.model_validate({**GPU, **fields})


def test_parameter_counts_equal_what_the_predictor_traced() -> None:
    """The analytic counts (no torch) against the parameters the memory predictor traced from the real
    modules for every fleet model (norms, which the count leaves out, are < 0.1 %)."""
    traced: dict[str, int] = {}
    for row in json.loads(fleet_throughput.STORE.read_text())["rows"]:
        p = row.get("prediction")
        if p and "full" in row["spec"]["experiment"]:
            traced[row["spec"]["model"]] = p["tracedParameters"]
    assert len(traced) >= 10
    for model, count in traced.items():
        total = parameter_counts(CATALOG.models[model].architecture or {}).total
        assert abs(total - count) / count < 1e-3, (model, total, count)


def test_every_catalog_architecture_is_counted() -> None:
    for name, model in CATALOG.models.items():
        if model.architecture:
            counts = parameter_counts(model.architecture)
            assert 0 < counts.active <= counts.total, name


def test_the_constants_are_the_fit_and_the_docs_table_is_fresh() -> None:
    """FITTED is what `bench/fleet_throughput.py fit` finds (to its rounding: a BLAS may move the last digit),
    and docs/benchmarks.md's table is what `tabulate` writes from it."""
    pytest.importorskip("numpy")
    fitted = fleet_throughput.fit(fleet_throughput.STORE)
    for name, value in fitted.efficiency.items():
        assert constants.FITTED.efficiency[name] == pytest.approx(value, abs=0.002), name
    pairs = [(fitted.layer_seconds[k], constants.FITTED.layer_seconds[k]) for k in constants.FITTED.layer_seconds]
    pairs += [(getattr(fitted, k), getattr(constants.FITTED, k)) for k in
              ("expert_seconds", "expert_token_seconds", "expert_full_factor", "rdma_bytes", "tcp_bytes",
               "expert_parallel_seconds")]  # fmt: skip
    for new, stored in pairs:
        assert stored == pytest.approx(new, rel=0.06)
    assert fitted.gpu_efficiency.keys() == constants.FITTED.gpu_efficiency.keys() == {"H100", "H200"}
    for family, value in fitted.gpu_efficiency.items():
        assert constants.FITTED.gpu_efficiency[family] == pytest.approx(value, abs=0.002), family
    body, found = fleet_throughput.report(*fleet_throughput.validated(fleet_throughput.STORE))
    assert docs_section(fleet_throughput.SECTION) == body, "run: bench/fleet_throughput.py tabulate --write-docs"
    assert found == {
        "THROUGHPUT_BANDS": constants.THROUGHPUT_BANDS,
        "THROUGHPUT_UNSEEN_MODEL_BANDS": constants.THROUGHPUT_UNSEEN_MODEL_BANDS,
    }
    assert docs_section(fleet_throughput.OWN_SECTION) == fleet_throughput.tabulate_own(write_docs=False)


def docs_section(name: str) -> str:
    docs = fleet_throughput.DOCS.read_text()
    return docs.split(f"<!-- {name}:start -->\n", 1)[1].split(f"\n<!-- {name}:end -->", 1)[0]


def test_more_tokens_per_step_and_fast_kernels_are_faster_per_gpu() -> None:
    base = tp.predict_throughput(spec(), CATALOG)
    longer = tp.predict_throughput(spec(batchSize=64), CATALOG)
    fast = tp.predict_throughput(spec(fastKernels=[True, True, True]), CATALOG)
    assert base is not None and longer is not None and fast is not None
    assert longer.tokens_per_gpu_per_second_estimate > base.tokens_per_gpu_per_second_estimate
    assert fast.tokens_per_second_estimate > base.tokens_per_second_estimate
    assert 0 < base.mfu_percent_estimate < 100 and base.dominant == "compute"


def test_across_nodes_tcp_is_slower_than_rdma() -> None:
    tcp = tp.predict_throughput(spec(numberGpus=16, numberNodes=2), CATALOG)
    rdma = tp.predict_throughput(spec(numberGpus=16, numberNodes=2, enableRoce=True), CATALOG)
    assert tcp is not None and rdma is not None
    assert tcp.exposed_communication_seconds > rdma.exposed_communication_seconds >= 0
    assert tcp.step_seconds_estimate > rdma.step_seconds_estimate
    assert tcp.dominant == "communication"


def test_fast_moe_across_ranks_stalls_every_moe_layer_and_on_one_rank_does_not() -> None:
    """fastMoe above 1 dispatches tokens across ranks, and each MoE layer waits for the host (the fitted
    expert_parallel_seconds); 1 runs the kernels without dispatch; a dense model has no MoE layer to stall."""
    moe = {"model": "granite-3.1-3b-a800m-instruct", "numberGpus": 4, "batchSize": 4, "modelMaxLength": 512}
    one, four = (tp.step_model(spec(**moe, fastMoe=n), CATALOG) for n in (1, 4))
    assert one is not None and four is not None
    layers = parameter_counts(CATALOG.models[moe["model"]].architecture or {}).layers
    assert (one.expert_parallel_layers, four.expert_parallel_layers) == (0, layers)
    stall = four.micro_steps * layers * constants.FITTED.expert_parallel_seconds
    assert four.seconds().overhead - one.seconds().overhead == pytest.approx(stall)
    dense = tp.step_model(spec(), CATALOG)
    assert dense is not None and dense.expert_parallel_layers == 0


def test_cpu_ranks_and_unknown_gpus_have_no_prediction_and_say_why() -> None:
    cpu = spec(numberGpus=0, gpuModel=None, model="ftbench-tiny-llama", modelMaxLength=512, batchSize=4)
    assert tp.predict_throughput(cpu, CATALOG) is None
    assert "CPU" in (tp.why_no_throughput(cpu, CATALOG) or "")
    odd = spec(gpuModel="Mystery-GPU")
    assert tp.predict_throughput(odd, CATALOG) is None and "Mystery-GPU" in (tp.why_no_throughput(odd, CATALOG) or "")


@pytest.mark.parametrize(
    ("fields", "bounded"),
    [
        ({}, "maxSteps"),
        ({"maxSteps": -1, "numTrainEpochs": 2.0}, "epochs"),
        ({"maxSteps": 100000, "stopAfterSeconds": 600}, "stopAfterSeconds"),
        ({"maxSteps": 100000, "autoStopMethod": "WARMUP_60S_STABLE_120S_OR_10_STEPS"}, "autoStop"),
    ],
)
def test_run_time_follows_the_stop_settings(fields: dict[str, Any], bounded: str) -> None:
    s = spec(**fields)
    t = tp.predict_throughput(s, CATALOG)
    assert t is not None
    r = tp.run_time(s, CATALOG, t)
    assert r.bounded_by == bounded
    if bounded == "maxSteps":
        assert r.steps_estimate == 100 and r.seconds_estimate == pytest.approx(100 * t.step_seconds_estimate)
    if bounded == "epochs":  # 4096 entries twice, 64 per step (batchSize 16 x gradientAccumulationSteps 4)
        assert r.steps_estimate == 128
    if bounded == "stopAfterSeconds":
        assert r.seconds_estimate == 600
    if bounded == "autoStop":  # >= 60 s warmup plus >= 120 s stable
        assert 180 <= r.seconds_estimate < 180 + 3 * t.step_seconds_estimate
    assert r.gpu_hours_estimate == pytest.approx(r.seconds_estimate * 8 / 3600)
    repeated = tp.run_time(spec(**fields, repeats=3), CATALOG, t)
    assert repeated.seconds_estimate == pytest.approx(3 * r.seconds_estimate)


def test_a_sweep_states_its_gpu_hours_and_the_points_it_cannot_price() -> None:
    gpu = [SweepPoint(i, {"batchSize": b}, {}, spec(batchSize=b)) for i, b in enumerate((8, 16))]
    cpu = SweepPoint(2, {}, {}, spec(numberGpus=0, gpuModel=None, model="ftbench-tiny-llama", modelMaxLength=512))
    cost = sweep_cost([*gpu, cpu], CATALOG)
    each = [tp.run_time(p.spec, CATALOG, tp.predict_throughput(p.spec, CATALOG)).gpu_hours_estimate  # type: ignore[arg-type]
            for p in gpu if p.spec is not None]  # fmt: skip
    assert (cost.priced, cost.unpriced) == (2, 1) and cost.gpu_hours_estimate == pytest.approx(sum(each))
    assert "GPU-hours" in cost.sentence() and "1 point(s) without a prediction" in cost.sentence()


def test_a_report_shows_a_gpu_runs_predicted_throughput_beside_the_measured() -> None:
    """Issue 46.4: `ftbench report`'s runs table, for a GPU run of its own (a CPU run gets no such columns)."""
    from ftbench.contracts.results import Metrics
    from ftbench.report.data import RunMeasurement
    from ftbench.report.render import _runs_table

    predicted = tp.predict_throughput(spec(), CATALOG)
    assert predicted is not None
    measured = predicted.tokens_per_second_estimate / 1.25  # the prediction 25 % over
    ones = ("trainRuntimeSeconds", "trainSteps", "trainSamples", "trainTokens", "trainNonPaddingTokens",
            "trainSamplesPerSecond", "trainStepsPerSecond", "trainTokensPerSecond", "trainTokensPerGpuPerSecond",
            "datasetTokensPerSecond", "datasetTokensPerSecondPerGpu")  # fmt: skip
    metrics = Metrics.model_validate({**dict.fromkeys(ones, 1), "steadyStateTokensPerSecond": measured})
    table = _runs_table([RunMeasurement("gpu-run", spec().to_wire(), "Succeeded", metrics)])
    cells = dict(zip(table.headers, table.rows[0], strict=True))
    assert cells["tokens/s prediction error %"] == "+25.0"
    assert cells["predicted tokens/s (estimate)"] == f"{predicted.tokens_per_second_estimate:,.1f}"
    band = cells["how sure: out-of-sample p90 error %"]  # the default release is older than the fleet's
    assert band.endswith("(leave one model out, widened: outside the calibration)")


def test_a_reports_sweep_table_shows_each_points_predicted_throughput_beside_its_runs_mean() -> None:
    """Issue 46: the sweep table's predicted tokens/s per point, and its error against the mean steady tokens/s
    of the point's runs (two repeats, 100 and 300: mean 200)."""
    from ftbench.api.sweep import PointRow
    from ftbench.contracts.results import Metrics
    from ftbench.report.data import RunMeasurement, SweepData
    from ftbench.report.render import _sweep_table

    predicted = tp.predict_throughput(spec(), CATALOG)
    assert predicted is not None
    ones = ("trainRuntimeSeconds", "trainSteps", "trainSamples", "trainTokens", "trainNonPaddingTokens",
            "trainSamplesPerSecond", "trainStepsPerSecond", "trainTokensPerSecond", "trainTokensPerGpuPerSecond",
            "datasetTokensPerSecond", "datasetTokensPerSecondPerGpu")  # fmt: skip
    runs = tuple(
        RunMeasurement(f"r{i}", spec().to_wire(), "Succeeded",
                       Metrics.model_validate({**dict.fromkeys(ones, 1), "steadyStateTokensPerSecond": rate}), 0, i)
        for i, rate in enumerate((100.0, 300.0))
    )  # fmt: skip
    row = PointRow(point=0, values={"batchSize": 16}, phase="Succeeded", repeats_done=2)
    sweep = SweepData("s", "trainTokensPerSecond", "max", (row,), {0: spec()}, runs)
    table = _sweep_table(sweep)
    cells = dict(zip(table.headers, table.rows[0], strict=True))
    value = predicted.tokens_per_second_estimate
    assert cells["predicted tokens/s (estimate)"] == f"{value:,.1f}"
    assert cells["tokens/s prediction error %"] == f"{100 * (value - 200) / 200:+.1f}"


def test_a_runs_network_preflight_replaces_the_fitted_inter_node_bandwidth() -> None:
    """Issue 46.1: a multi-node run with run.networkPreflight is held against the prediction at the allGather busbw
    its preflight measured (status.prediction.throughputWithPreflight), not at the fitted bandwidth."""
    from ftbench.api.prediction_report import PredictionReport
    from ftbench.contracts.network import NetworkInEffect
    from ftbench.contracts.prediction import MemoryPrediction

    two_nodes = tp.predict_throughput(spec(numberGpus=16, numberNodes=2), CATALOG)
    one_node = tp.predict_throughput(spec(), CATALOG)
    assert two_nodes is not None and one_node is not None
    assert two_nodes.inter_node_bytes_per_gpu > 0 == one_node.inter_node_bytes_per_gpu
    assert one_node.with_bus_bandwidth(1e9) == one_node  # nothing crosses nodes
    fast, slow = two_nodes.with_bus_bandwidth(1e12), two_nodes.with_bus_bandwidth(1e9)
    assert fast.exposed_communication_seconds == 0 and fast.step_seconds_estimate < two_nodes.step_seconds_estimate
    assert slow.dominant == "communication" and slow.step_seconds_estimate == pytest.approx(
        two_nodes.inter_node_bytes_per_gpu / 1e9
    )

    def network(gbps: float) -> NetworkInEffect:
        sample = {"collective": "allGather", "sizeBytes": 1 << 30, "seconds": 1.0, "algBandwidthGbps": gbps,
                  "busBandwidthGbps": gbps}  # fmt: skip
        return NetworkInEffect.model_validate({"backend": "nccl", "transport": "socket", "ranks": 16,
                                               "warmupIterations": 1, "iterations": 5, "seconds": 3.0,
                                               "bandwidth": [sample], "peakBusBandwidthGbps": gbps})  # fmt: skip

    memory = MemoryPrediction.model_validate({"peakBytes": 1, "split": {"parametersBytes": 1, "gradientsBytes": 0,
        "optimizerBytes": 0, "activationsBytes": 0}, "phase": "forward", "device": "cuda", "worldSize": 16,
        "sharding": "FULL_SHARD", "tracedParameters": 1, "trainableParameters": 1, "seconds": 0.1})  # fmt: skip
    report = PredictionReport(prediction=memory, throughput=two_nodes)
    measured = slow.tokens_per_second_estimate
    checked = report.measured(None, oom=False, tokens_per_second=measured, network=network(1.0))
    assert checked.throughput_with_preflight == slow and checked.throughput_error_percent == 0.0
    assert checked.throughput == two_nodes  # the prediction made before the run stays as it was
    plain = report.measured(None, oom=False, tokens_per_second=measured)
    assert plain.throughput_with_preflight is None and (plain.throughput_error_percent or 0) > 0


def test_the_operators_sweep_cost_leaves_out_points_ruled_out_as_they_are_judged() -> None:
    """Issue 46.2: the sweep's predictedGpuHoursEstimate drops a point once a child's prediction says it does not fit
    or the OOM frontier skips it, and says how many points are not judged yet."""
    from ftbench.api.sweep import PointRow
    from ftbench.sweep.cost import observed_fits
    from ftbench.sweep.schedule import RunState

    points = [SweepPoint(i, {"batchSize": b}, {}, spec(batchSize=b)) for i, b in enumerate((8, 16, 32, 64))]
    rows = [PointRow(point=i, phase=phase) for i, phase in enumerate(("Succeeded", "Running", "Pending", "Skipped"))]
    runs = [RunState("a", 0, 0, predicted_fits=True), RunState("b", 1, 0, predicted_fits=False),
            RunState("c", 1, 1, predicted_fits=True)]  # fmt: skip
    fits = observed_fits(rows, runs)
    assert fits == {0: True, 1: False, 3: False}  # any repeat predicted not to fit decides
    cost = sweep_cost(points, CATALOG, fits)
    assert (cost.priced, cost.predicted_oom, cost.unverified) == (2, 2, 1)
    assert "2 point(s) predicted not to fit are left out" in cost.sentence()
    assert "1 point(s) not yet predicted are included" in cost.sentence()
    assert "are included (the memory prediction" in sweep_cost(points, CATALOG).sentence()
