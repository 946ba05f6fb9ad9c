"""The effect of each varied field: paired ratios between points differing in that field only."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.api.sweep import PointRow
from ftbench.contracts.results import Metrics
from ftbench.report.data import RunMeasurement, SweepData
from ftbench.report.effects import PEAK_MEMORY, effect_rows, toggle_effects

BASE: dict[str, Any] = {
    "trainRuntimeSeconds": 1.0, "trainSteps": 1, "trainSamples": 1, "trainTokens": 1, "trainNonPaddingTokens": 1,
    "trainSamplesPerSecond": 1.0, "trainStepsPerSecond": 1.0, "trainTokensPerSecond": 1.0,
    "trainTokensPerGpuPerSecond": 1.0, "datasetTokensPerSecond": 1.0, "datasetTokensPerSecondPerGpu": 1.0,
}  # fmt: skip


def _row(point: int, packing: bool, ckpt: bool, tps: float, ci: float | None, phase: str = "Succeeded") -> PointRow:
    return PointRow(
        point=point,
        values={"packing": packing, "gradientCheckpointing": ckpt},
        phase=phase,
        train_tokens_per_second=tps,
        dataset_tokens_per_second=tps / 2,
        objective=tps,
        objective_ci95_low=None if ci is None else tps * (1 - ci),
        objective_ci95_high=None if ci is None else tps * (1 + ci),
    )


def _run(point: int, rss: int) -> RunMeasurement:
    return RunMeasurement(f"p{point}", {}, "Succeeded", Metrics.model_validate({**BASE, "cpuPeakRssBytes": rss}), point)


def sweep(rows: list[PointRow], runs: list[RunMeasurement]) -> SweepData:
    return SweepData("s", "trainTokensPerSecond", "max", tuple(rows), {}, tuple(runs))


def test_each_toggle_is_compared_with_its_baseline_across_the_other_fields() -> None:
    rows = [
        _row(0, False, False, 100.0, 0.02),
        _row(1, False, True, 80.0, 0.02),
        _row(2, True, False, 150.0, 0.02),
        _row(3, True, True, 128.0, 0.4),  # a noisy point: its interval overlaps its pair's
    ]
    runs = [_run(0, 1000), _run(1, 600), _run(2, 900), _run(3, 540)]
    effects = {(e.field, e.metric): e for e in toggle_effects(sweep(rows, runs))}
    packing = effects[("packing", "trainTokensPerSecond")]
    assert (packing.baseline, packing.value) == (False, True)
    assert packing.ratios == pytest.approx((1.5, 1.6)) and packing.median == pytest.approx(1.55)
    assert packing.beyond_noise == (1, 2)  # point 3's wide interval overlaps point 1's
    assert effects[("packing", "datasetTokensPerSecond")].beyond_noise is None  # not the objective
    assert effects[("gradientCheckpointing", PEAK_MEMORY)].ratios == pytest.approx((0.6, 0.6))
    (row,) = [
        r for r in effect_rows(list(effects.values())) if r[:3] == ("packing", "False -> True", "trainTokensPerSecond")
    ]
    assert row[3:] == ("2", "1.55x", "1.50x to 1.60x", "1 of 2")


def test_unmeasured_points_and_single_values_give_no_effect() -> None:
    rows = [_row(0, False, False, 100.0, None), _row(1, True, False, 0.0, None, phase="GpuOom")]
    assert toggle_effects(sweep(rows, [])) == []
