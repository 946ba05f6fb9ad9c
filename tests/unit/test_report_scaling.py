"""The scaling section's arithmetic on hand-made runs (no training): efficiency, spread, per-rank bytes."""

from __future__ import annotations

from typing import Any

import pytest

from ftbench.contracts.results import Metrics, RankMemory
from ftbench.report import scaling
from ftbench.report.data import RunMeasurement, SweepData


def _run(ranks: int, tps: float, params: int, **spec: Any) -> RunMeasurement:
    metrics = Metrics(
        train_runtime_seconds=1.0, train_steps=1, train_samples=1, train_tokens=1, train_non_padding_tokens=1,
        train_samples_per_second=1.0, train_steps_per_second=1.0, train_tokens_per_second=tps,
        train_tokens_per_gpu_per_second=tps, dataset_tokens_per_second=tps, dataset_tokens_per_second_per_gpu=tps,
        model_parameter_bytes=1000,
        rank_memory=[RankMemory(rank=i, parameter_bytes=params, gradient_bytes=params, optimizer_state_bytes=2 * params)
                     for i in range(ranks)],
    )  # fmt: skip
    return RunMeasurement(name=f"r{ranks}", spec={"numberGpus": ranks, "device": "cpu", **spec}, phase="Succeeded",
                          metrics=metrics)  # fmt: skip


def test_efficiency_spread_and_bytes_per_rank() -> None:
    runs = [
        _run(1, 100.0, 1000),
        _run(1, 120.0, 1000),  # a repeat of the baseline: mean 110
        _run(2, 176.0, 500),
        _run(2, 154.0, 500),
        _run(4, 220.0, 250),
        _run(2, 88.0, 500, fsdpOffloadParams=True),
        _run(2, 200.0, 1000, distributedBackend="DDP"),
    ]
    rows = {(r.config, r.ranks): r for r in scaling.scaling_rows(runs)}
    base = rows[(scaling.BASELINE, 1)]
    assert base.tokens_per_second == 110.0 and base.spread == 10.0 and base.efficiency == pytest.approx(1.0)
    two = rows[("FSDP FULL_SHARD", 2)]
    assert two.tokens_per_second == 165.0 and two.spread == 11.0 and two.repeats == 2
    assert two.efficiency == pytest.approx(165 / (2 * 110))
    assert two.shard_fraction == 0.5 and two.optimizer_bytes_per_rank == 1000
    assert rows[("FSDP FULL_SHARD", 4)].efficiency == pytest.approx(220 / (4 * 110))
    assert rows[("FSDP FULL_SHARD + offload", 2)].efficiency == pytest.approx(88 / 220)
    assert rows[("DDP", 2)].shard_fraction == 1.0
    # The trade-off is read where most configurations ran (2 ranks), not where one was scaled further.
    assert {r.config for r in scaling.tradeoff(list(rows.values()))} == {
        "FSDP FULL_SHARD",
        "FSDP FULL_SHARD + offload",
        "DDP",
    }
    only_full = [r for r in rows.values() if r.ranks != 2 or r.config == "FSDP FULL_SHARD"]
    assert [r.ranks for r in scaling.tradeoff(only_full)] == [4]  # a tie: the largest rank count
    sweep = SweepData("s", "trainTokensPerSecond", "max", (), {}, tuple(runs))
    assert scaling.applies(sweep) and scaling.on_cpu(sweep)
    assert not scaling.applies(SweepData("s", "x", "max", (), {}, tuple(runs[:2])))
