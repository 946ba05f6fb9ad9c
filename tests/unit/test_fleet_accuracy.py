"""How sure a memory prediction is: the fleet's error band of the run's group, its scope's where the group is
small or the model's kind unknown (ftbench.api.fleet_accuracy; the bands' freshness: tests/trainer/test_fleet.py)."""

from __future__ import annotations

from ftbench.api import fleet_accuracy as fa
from ftbench.api.prediction import memory_fit
from ftbench.api.profile import ClusterProfile
from ftbench.catalog import load_catalog
from ftbench.contracts.prediction import MemoryPrediction, MemorySplit

GIB = 2**30


def test_every_catalog_architecture_has_a_kind() -> None:
    catalog = load_catalog()
    kinds = {name: fa.kind(m.architecture) for name, m in catalog.models.items() if m.architecture}
    assert kinds["llama3.1-8b"] == kinds["granite-3.1-8b-instruct"] == kinds["granite-4.0-micro"] == fa.DENSE
    for moe in (
        "mixtral-8x7b-instruct-v0.1",
        "granite-3.1-3b-a800m-instruct",
        "granite-4.0-h-tiny",
        "granite-4.0-h-1b",
    ):
        assert kinds[moe] == fa.MOE, moe
    assert set(kinds.values()) == {fa.DENSE, fa.MOE}


def test_the_group_band_else_the_scope_band() -> None:
    for where in fa.SCOPES:  # the generated table covers every scope
        assert fa.BANDS[(where, fa.ANY_KIND)][0] >= fa.MIN_ROWS
    one = fa.fleet_accuracy(1, 1, fa.DENSE)
    assert one is not None and one.group == "one GPU, dense"
    rows, median, p90 = fa.BANDS[("one GPU", fa.DENSE)]
    assert (one.rows, one.median_percent_points, one.p90_percent_points) == (rows, median, p90)
    unknown = fa.fleet_accuracy(8, 1, None)
    assert unknown is not None and unknown.group == "several GPUs on one node"
    small = [k for k, (n, _, _) in fa.BANDS.items() if k[1] != fa.ANY_KIND and n < fa.MIN_ROWS]
    for where, which in small:  # too few rows: the scope's band over both kinds
        world, nodes = {"one GPU": (1, 1), "several GPUs on one node": (8, 1), "several nodes": (32, 4)}[where]
        answer = fa.fleet_accuracy(world, nodes, which)
        assert answer is not None and answer.group == where
    assert "in 9 of 10" in one.sentence()


def test_the_verdict_carries_the_band() -> None:
    prediction = MemoryPrediction(
        peak_bytes=40 * GIB, split=MemorySplit(parameters_bytes=0, gradients_bytes=0, optimizer_bytes=0,
                                               activations_bytes=0), phase="backward", device="cuda", world_size=8,
        nodes=1, sharding="FULL_SHARD", traced_parameters=1, trainable_parameters=1, seconds=1.0,
    )  # fmt: skip
    fit = memory_fit(prediction, "NVIDIA-A100-SXM4-80GB", ClusterProfile(), fa.MOE)
    assert fit is not None and fit.fleet_accuracy is not None
    assert fit.fleet_accuracy.group == "several GPUs on one node, MoE/hybrid"
    assert fit.to_wire()["fleetAccuracy"]["p90PercentPoints"] == fa.BANDS[("several GPUs on one node", fa.MOE)][2]
    cpu = prediction.model_copy(update={"device": "cpu"})
    assert memory_fit(cpu, "NVIDIA-A100-SXM4-80GB", ClusterProfile()) is None


def test_borderline_is_the_fleets_error_around_the_capacity() -> None:
    """A requirement within the group's p90 error of the card is borderline: 1-GPU dense predictions were within
    2-3 points, MoE on one node within 16, so the same headroom is sure for one and borderline for the other."""
    capacity = 80 * GIB
    dense = fa.BANDS[("one GPU", fa.DENSE)][2]
    moe = fa.BANDS[("several GPUs on one node", fa.MOE)][2]
    assert dense < 5 < moe
    headroom = 5 / 100 * capacity  # 5 points below the card
    context = 1720 * 2**20  # the profile's default runtimeOverhead

    def fit(world: int, kind: str) -> bool:
        prediction = MemoryPrediction(
            peak_bytes=int(capacity - headroom - context), split=MemorySplit(parameters_bytes=0, gradients_bytes=0,
            optimizer_bytes=0, activations_bytes=0), phase="optimizer", device="cuda", world_size=world, nodes=1,
            sharding="none", traced_parameters=1, trainable_parameters=1, seconds=1.0,
        )  # fmt: skip
        if world > 1:  # the communication term on several ranks: keep the same headroom
            prediction = prediction.model_copy(update={"peak_bytes": prediction.peak_bytes - int(1.75 * GIB)})
        answer = memory_fit(prediction, "NVIDIA-A100-SXM4-80GB", ClusterProfile(), kind)
        assert answer is not None and answer.fits
        return answer.borderline

    assert fit(1, fa.DENSE) is False
    assert fit(8, fa.MOE) is True
