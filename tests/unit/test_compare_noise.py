"""`ftbench results compare` says whether a difference is beyond the noise.

Runs are built as the local store holds them (results as JSON); the intervals are the runs' own
batch-means intervals, or with several results the t interval of their mean.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ftbench.local.store import RunRecord
from ftbench.report.compare import BEYOND_NOISE, BEYOND_RUN_NOISE, NO_INTERVAL, WITHIN_NOISE, compare, run_interval


def _metrics(tps: float, rel: float | None, flags: list[str] | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {
        "trainRuntimeSeconds": 10.0, "trainSteps": 40, "trainSamples": 160, "trainTokens": 1000,
        "trainNonPaddingTokens": 900, "trainSamplesPerSecond": 16.0, "trainStepsPerSecond": 4.0,
        "trainTokensPerSecond": tps, "trainTokensPerGpuPerSecond": tps, "datasetTokensPerSecond": tps,
        "datasetTokensPerSecondPerGpu": tps, "steadyStateTokensPerSecond": tps, "measuredSteps": 36,
        "stepTimeMeanSeconds": 1000 / tps, "noiseFlags": flags or [],
        "measurementQuality": "flagged" if flags else "clean",
    }  # fmt: skip
    if rel is not None:
        m |= {"steadyStateTokensPerSecondCi95Low": tps * (1 - rel), "steadyStateTokensPerSecondCi95High": tps * (1 + rel),
              "throughputCi95Relative": rel}  # fmt: skip
    return m


def _run(name: str, *metrics: dict[str, Any]) -> RunRecord:
    results = [{"outcome": "Succeeded", "isValid": True, "metrics": m} for m in metrics]
    return RunRecord(
        id=f"id-{name}", name=name, started_at="", finished_at=None, experiment="x", engine="trl", model="m",
        number_gpus=0, batch_size=4, model_max_length=512, status="Succeeded", is_valid=True,
        train_tokens_per_second=None, run_dir="", spec={"batchSize": 4}, results=results,
    )  # fmt: skip


def _rows(a: RunRecord, b: RunRecord) -> dict[str, tuple[str, ...]]:
    return {r[0]: r[1:] for r in compare(a, b).rows}


def test_overlapping_intervals_are_within_noise() -> None:
    rows = _rows(_run("a", _metrics(1000, 0.05)), _run("b", _metrics(1040, 0.05)))
    assert rows["steadyStateTokensPerSecond"] == ("1,000.0±5.0%", "1,040.0±5.0%", "+4.0%", WITHIN_NOISE)
    assert rows["trainTokensPerSecond"][3] == ""  # no interval of its own


def test_separate_intervals_are_beyond_noise() -> None:
    # single runs: their intervals are within-run only, so the verdict asks for repeats
    rows = _rows(_run("a", _metrics(1000, 0.02)), _run("b", _metrics(1100, 0.02)))
    assert rows["steadyStateTokensPerSecond"][2:] == ("+10.0%", BEYOND_RUN_NOISE)
    repeated_a = _run("a", _metrics(990, None), _metrics(1000, None), _metrics(1010, None))
    repeated_b = _run("b", _metrics(1090, None), _metrics(1100, None), _metrics(1110, None))
    assert _rows(repeated_a, repeated_b)["steadyStateTokensPerSecond"][3] == BEYOND_NOISE


def test_a_run_without_an_interval_is_said_so() -> None:
    rows = _rows(_run("a", _metrics(1000, None, ["shortWindow"])), _run("b", _metrics(2000, 0.01)))
    assert rows["steadyStateTokensPerSecond"] == ("1,000.0", "2,000.0±1.0%", "+100.0%", NO_INTERVAL)
    assert rows["noiseFlags"] == ("shortWindow", "clean", "", "")


def test_several_results_use_the_spread_of_their_means() -> None:
    repeats = _run("r", _metrics(900, None), _metrics(1000, None), _metrics(1100, None))
    interval = run_interval(repeats, "steadyStateTokensPerSecond")
    assert interval is not None and interval.estimate == pytest.approx(1000)
    assert interval.half_width == pytest.approx(4.303 * 100 / 3**0.5)
    rows = _rows(repeats, _run("b", _metrics(1050, 0.01)))
    assert rows["results averaged"] == ("3", "1", "", "")
    assert rows["steadyStateTokensPerSecond"][3] == WITHIN_NOISE


def test_ftbench_run_prints_every_rate_with_its_interval() -> None:
    """Issue 26: the results table of `ftbench run` gives each per-second rate its ± (the run's
    own relative half-width); counts and runtimes stay bare; no interval, no ±."""
    from ftbench.cli.cmd_run import results_table
    from ftbench.contracts.results import TrainerResult
    from ftbench.local.runner import RunOutcome

    def table(rel: float | None) -> dict[str, str]:
        result = TrainerResult.model_validate(
            {"outcome": "Succeeded", "isValid": True, "metrics": _metrics(2000.0, rel)}
        )
        text = results_table(RunOutcome("Succeeded", [result], 0))
        return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines() if "  " in line)

    rows = table(0.031)
    assert rows["train tokens/s (padded, all ranks)"] == "2,000.000 ±3.1%"
    assert rows["train tokens/s per GPU"] == "2,000.000 ±3.1%" and rows["steps/s"] == "4.000 ±3.1%"
    assert rows["runtime (s)"] == "10.000" and rows["steps"] == "40"
    assert "±" not in table(None)["train tokens/s (padded, all ranks)"]
