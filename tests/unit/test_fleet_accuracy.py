"""How sure a prediction is: the fleet's out-of-sample band of the run's group (grouped folds for a model the fleet
has, the model left out for one it has not), widened and said in one line where the question lies outside the
calibration, and one verdict: no total above the card beside "fits" (ftbench.predict.fleet_accuracy,
ftbench.predict.prediction; the bands' freshness: tests/trainer/test_fleet.py, tests/unit/test_throughput.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.profile import ClusterProfile
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit
from ftbench.predict import constants
from ftbench.predict import fleet_accuracy as fa
from ftbench.predict.prediction import memory_fit, prediction_report

GIB = 2**30
CATALOG = load_catalog()
A100 = "NVIDIA-A100-SXM4-80GB"
INSIDE: dict[str, Any] = {"model": "llama3.1-8b", "numberGpus": 4, "gpuModel": A100, "batchSize": 8,
                          "modelMaxLength": 1024, "fmsHfTuningVersion": "3.1.0"}  # fmt: skip


def spec(**fields: Any) -> FineTuneExperimentSpec:
    return FineTuneExperimentSpec.model_validate({**INSIDE, **fields})


def prediction(world: int = 8, peak: int = 40 * GIB, **fields: Any) -> MemoryPrediction:
    return MemoryPrediction(
        peak_bytes=peak, split=MemorySplit(parameters_bytes=0, gradients_bytes=0, optimizer_bytes=0,
                                           activations_bytes=0), phase="backward", device="cuda", world_size=world,
        nodes=1, sharding="FULL_SHARD", traced_parameters=1, trainable_parameters=1, seconds=1.0, **fields,
    )  # fmt: skip


def test_every_catalog_architecture_has_a_kind() -> None:
    kinds = {name: fa.kind(m.architecture) for name, m in CATALOG.models.items() if m.architecture}
    assert kinds["llama3.1-8b"] == kinds["granite-3.1-8b-instruct"] == kinds["granite-4.0-micro"] == fa.DENSE
    for moe in (
        "mixtral-8x7b-instruct-v0.1",
        "granite-3.1-3b-a800m-instruct",
        "granite-4.0-h-tiny",
        "granite-4.0-h-1b",
    ):
        assert kinds[moe] == fa.MOE, moe
    assert set(kinds.values()) == {fa.DENSE, fa.MOE}


def test_a_fleet_model_gets_its_groups_grouped_fold_band_else_its_scopes() -> None:
    for where in fa.SCOPES:  # the generated tables cover every scope
        assert constants.MEMORY_BANDS[(where, fa.ANY_KIND)][0] >= constants.MIN_ROWS
        assert constants.MEMORY_UNSEEN_MODEL_BANDS[(where, fa.ANY_KIND)][0] >= constants.MIN_ROWS
        assert (where, fa.ANY_KIND) in constants.THROUGHPUT_BANDS and (
            where,
            fa.ANY_KIND,
        ) in constants.THROUGHPUT_UNSEEN_MODEL_BANDS
    one = fa.fleet_accuracy(fa.Question("one GPU", fa.DENSE, "llama3.1-8b"))
    assert one is not None and (one.group, one.validation) == ("one GPU, dense", fa.GROUPED)
    assert (one.rows, one.median_percent_points, one.p90_percent_points) == constants.MEMORY_BANDS[
        ("one GPU", fa.DENSE)
    ]
    small = [k for k, (n, _, _) in constants.MEMORY_BANDS.items() if k[1] != fa.ANY_KIND and n < constants.MIN_ROWS]
    for where, which in small:  # too few rows: the scope's band over both kinds
        answer = fa.fleet_accuracy(fa.Question(where, which, "llama3.1-8b"))
        assert answer is not None and answer.group == where
    assert "out of sample (grouped 5-fold)" in one.sentence() and "in 9 of 10" in one.sentence()


def test_a_model_the_fleet_lacks_gets_the_model_left_out_band() -> None:
    assert "llama3-8b" not in constants.FLEET_MODELS
    q = fa.question(spec(model="llama3-8b"), CATALOG)
    assert q.outside == ()  # a llama like the fleet's, on its GPUs and release
    memory, rate = fa.fleet_accuracy(q), fa.throughput_accuracy(q)
    assert memory is not None and memory.validation == fa.MODEL_LEFT_OUT
    assert (
        memory.p90_percent_points == constants.MEMORY_UNSEEN_MODEL_BANDS[("several GPUs on one node", fa.ANY_KIND)][2]
    )
    assert rate is not None and rate.validation == fa.MODEL_LEFT_OUT
    assert rate.p90_percent == constants.THROUGHPUT_UNSEEN_MODEL_BANDS[("several GPUs on one node", fa.ANY_KIND)][2]


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"gpuModel": "NVIDIA-L40S"}, "GPU NVIDIA-L40S (L40S): no fleet run on it"),
        ({"gpuModel": "NVIDIA-H200"}, "GPU NVIDIA-H200 (H200): no fleet run on it"),
        ({"model": "granite-34b-code-base"}, "architecture gpt_bigcode (dense): no fleet model of it"),
        ({"engine": "trl"}, "engine trl: the fleet ran fms-hf-tuning 2.4.0"),
        ({"fmsHfTuningVersion": "3.2.2"}, "engine fms-hf-tuning 3.2.2: the fleet ran"),
        ({"numberGpus": 64, "numberNodes": 8}, "scale: 64 GPUs, the fleet ran at most 32"),
        ({"numberGpus": 64, "numberNodes": 8}, "scale: 8 nodes, the fleet ran at most 4"),
        ({"modelMaxLength": 16384}, "scale: modelMaxLength 16384, the fleet ran 512 to 8192"),
    ],
)
def test_outside_the_calibration_says_so_and_widens_the_band(fields: dict[str, Any], line: str) -> None:
    """Each kind of question the fleet did not calibrate (GPU family, architecture, engine release, scale) is one
    line in the band, and the band is the model-left-out one widened, for memory and throughput alike."""
    q = fa.question(spec(**fields), CATALOG)
    assert any(o.startswith(line) for o in q.outside), q.outside
    memory, rate = fa.fleet_accuracy(q), fa.throughput_accuracy(q)
    assert memory is not None and memory.validation == f"{fa.MODEL_LEFT_OUT}, widened"
    unseen = constants.MEMORY_UNSEEN_MODEL_BANDS[(q.scope, fa.ANY_KIND)]
    assert memory.p90_percent_points == round(unseen[2] * constants.OUTSIDE_FACTOR, 1)
    assert "outside the calibration" in memory.sentence() and line in memory.sentence()
    assert rate is not None and rate.validation.endswith("widened") and line in rate.sentence()


def test_inside_the_calibration_nothing_is_said_and_cpu_ranks_have_no_band() -> None:
    assert fa.question(spec(), CATALOG).outside == ()
    assert fa.outside_calibration(spec(numberGpus=2, device="cpu", gpuModel=None), CATALOG) == ()


def test_the_verdict_and_the_throughput_carry_their_bands() -> None:
    asked = fa.question(spec(model="granite-3.1-3b-a800m-instruct", numberGpus=8), CATALOG)
    fit = memory_fit(prediction(), A100, ClusterProfile(), asked)
    assert fit is not None and fit.fleet_accuracy is not None
    assert fit.fleet_accuracy.group == "several GPUs on one node, MoE/hybrid"
    assert (
        fit.to_wire()["fleetAccuracy"]["p90PercentPoints"]
        == constants.MEMORY_BANDS[("several GPUs on one node", fa.MOE)][2]
    )
    assert memory_fit(prediction().model_copy(update={"device": "cpu"}), A100, ClusterProfile()) is None
    report = prediction_report(prediction(world=4), spec(), CATALOG, ClusterProfile())
    assert report.throughput is not None and report.throughput.accuracy is not None
    wire = report.to_wire()["throughput"]["accuracy"]
    assert wire["validation"] == fa.GROUPED and wire["group"] == "several GPUs on one node, dense"


def test_no_total_above_the_card_stands_beside_fits() -> None:
    """A term the verdict leaves out (the unsharded gradients of FSDP's no_sync, the allocator's reserve) is shown as
    a risk with why, and the sentence's total is what must fit (issue 60.6's mixtral-8x7b and 405B cases)."""
    big = prediction(peak=50 * GIB, unsharded_gradient_bytes=87 * GIB)
    fit = memory_fit(big, A100, ClusterProfile())
    assert fit is not None and fit.fits and fit.predicted_total_bytes > fit.capacity_bytes
    assert [r.name for r in fit.at_risk] == ["unshardedGradients"]  # no activations here: no reserve
    sentence = fit.sentence()
    assert f"{fit.predicted_total_bytes / GIB:.1f}" not in sentence
    assert f"{fit.required_bytes / GIB:.1f} GiB per GPU must fit" in sentence
    assert "at risk" in sentence and "no_sync" in sentence
    small = memory_fit(prediction(peak=20 * GIB), A100, ClusterProfile())
    assert small is not None and small.fits and small.at_risk == [] and "at risk" not in small.sentence()
    oom = memory_fit(prediction(peak=90 * GIB), A100, ClusterProfile())
    assert oom is not None and not oom.fits and "does not fit" in oom.sentence()


def test_borderline_is_the_fleets_error_around_the_capacity() -> None:
    """A requirement within the group's p90 error of the card is borderline: 1-GPU dense predictions were within a
    few points, MoE on one node within about ten, so the same headroom is sure for one and borderline for the
    other."""
    capacity = 80 * GIB
    dense = constants.MEMORY_BANDS[("one GPU", fa.DENSE)][2]
    moe = constants.MEMORY_BANDS[("several GPUs on one node", fa.MOE)][2]
    assert dense < 5 < moe
    headroom = 5 / 100 * capacity  # 5 points below the card
    context = 1720 * 2**20  # the profile's default runtimeOverhead

    def borderline(world: int, kind: str, model: str) -> bool:
        peak = int(capacity - headroom - context) - (int(1.9 * GIB) if world > 1 else 0)  # communication on several
        answer = memory_fit(prediction(world, peak), A100, ClusterProfile(), fa.Question("", kind, model))
        assert answer is not None and answer.fits
        return answer.borderline

    assert borderline(1, fa.DENSE, "llama3.1-8b") is False
    assert borderline(8, fa.MOE, "mixtral-8x7b-instruct-v0.1") is True
