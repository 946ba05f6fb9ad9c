"""Seed 004's scaling study in a report: throughput against ranks, efficiency, per-rank memory.

A sweep whose points vary the number of ranks (`numberGpus`: GPUs, or CPU ranks with `device: cpu`)
gets a section of its own. Runs are grouped by configuration (FSDP strategy and parameter offload, or
the backend) and rank count; throughput is the mean over the point's repeats with the half-range as
its spread; scaling efficiency = tokens/s at N / (N x tokens/s at 1 rank), the 1-rank baseline being
the mean of the sweep's 1-rank runs. Per-rank memory is what the trainer read from the running model
and optimizer (`results.rankMemory`, the largest rank), so the sharding shows as bytes, not a claim.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ftbench.report.data import RunMeasurement, SweepData
from ftbench.report.plots import Figure, render_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

BASELINE = "1 rank"


@dataclass(frozen=True)
class ScalingRow:
    ranks: int
    config: str
    tokens_per_second: float
    spread: float  # half the range over repeats (0 with one repeat)
    repeats: int
    efficiency: float | None  # None without a 1-rank baseline
    parameter_bytes_per_rank: int
    optimizer_bytes_per_rank: int
    shard_fraction: float | None  # parameter bytes per rank / the whole model's


def _ranks(spec: Mapping[str, Any]) -> int:
    return max(1, int(spec.get("numberGpus", 0) or 0))


def config_of(spec: Mapping[str, Any]) -> str:
    """How a multi-rank run shards: 'FSDP FULL_SHARD', '... + offload', 'DDP'; 1 rank is the baseline."""
    if _ranks(spec) == 1:
        return BASELINE
    backend = spec.get("distributedBackend") or "FSDP"
    if backend != "FSDP":
        return str(backend)
    name = f"FSDP {spec.get('fsdpShardingStrategy') or 'FULL_SHARD'}"
    return name + (" + offload" if spec.get("fsdpOffloadParams") else "")


def applies(sweep: SweepData) -> bool:
    """A scaling study: measured runs at two or more rank counts."""
    return len({_ranks(r.spec) for r in sweep.runs if r.metrics is not None}) >= 2


def on_cpu(sweep: SweepData) -> bool:
    return any(r.spec.get("device") == "cpu" or not r.spec.get("numberGpus") for r in sweep.runs)


def scaling_rows(runs: Sequence[RunMeasurement]) -> list[ScalingRow]:
    groups: dict[tuple[str, int], list[RunMeasurement]] = {}
    for run in runs:
        if run.metrics is not None and run.phase == "Succeeded":
            groups.setdefault((config_of(run.spec), _ranks(run.spec)), []).append(run)
    base = [
        r.metrics.train_tokens_per_second for (c, _), rs in groups.items() if c == BASELINE for r in rs if r.metrics
    ]
    baseline = statistics.fmean(base) if base else None
    rows = []
    for (config, ranks), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != BASELINE, kv[0][0], kv[0][1])):
        metrics = [r.metrics for r in group if r.metrics is not None]
        tps = [m.train_tokens_per_second for m in metrics]
        mean = statistics.fmean(tps)
        first = metrics[0]
        params = max((m.parameter_bytes for m in first.rank_memory), default=0)
        optim = max((m.optimizer_state_bytes for m in first.rank_memory), default=0)
        rows.append(
            ScalingRow(
                ranks=ranks,
                config=config,
                tokens_per_second=mean,
                spread=(max(tps) - min(tps)) / 2,
                repeats=len(tps),
                efficiency=mean / (ranks * baseline) if baseline else None,
                parameter_bytes_per_rank=params,
                optimizer_bytes_per_rank=optim,
                shard_fraction=params / first.model_parameter_bytes if first.model_parameter_bytes else None,
            )
        )
    return rows


def tradeoff(rows: Sequence[ScalingRow]) -> list[ScalingRow]:
    """The strategy x offload trade-off: the configurations at the rank count that has the most of
    them (the largest such count on a tie), so a sweep may scale one configuration further than it
    compares them all."""
    multi = [r for r in rows if r.config != BASELINE]
    if not multi:
        return []
    counts = {n: sum(1 for r in multi if r.ranks == n) for n in {r.ranks for r in multi}}
    top = max(counts, key=lambda n: (counts[n], n))
    return [r for r in multi if r.ranks == top]


def _by_config(rows: Sequence[ScalingRow]) -> dict[str, list[ScalingRow]]:
    out: dict[str, list[ScalingRow]] = {}
    for r in rows:
        out.setdefault(r.config, []).append(r)
    base = out.pop(BASELINE, [])
    # Every configuration's line starts at the shared 1-rank baseline.
    return {c: sorted(base + rs, key=lambda r: r.ranks) for c, rs in out.items()}


def figures(rows: Sequence[ScalingRow], device: str, fmt: str = "png") -> list[Figure]:
    lines = _by_config(rows)
    ranks = sorted({r.ranks for r in rows})

    def draw(value: Callable[[ScalingRow], float], errors: bool) -> Callable[[Axes], None]:
        def _draw(ax: Axes) -> None:
            for config, series in lines.items():
                xs, ys = [r.ranks for r in series], [value(r) for r in series]
                yerr = [r.spread for r in series] if errors else None
                ax.errorbar(xs, ys, yerr=yerr, marker="o", capsize=3, label=config)
            ax.set_xticks(ranks)
            ax.set_ylim(bottom=0)

        return _draw

    return [
        render_figure(draw(lambda r: r.tokens_per_second, True), name="scaling-throughput",
                      title=f"Throughput against ranks ({device}; bars: spread over repeats)",
                      xlabel="ranks", ylabel=f"train tokens/s (all ranks, {device})", fmt=fmt),
        render_figure(draw(lambda r: r.parameter_bytes_per_rank + r.optimizer_bytes_per_rank, False),
                      name="scaling-memory", title="Parameter + optimizer-state bytes held per rank",
                      xlabel="ranks", ylabel="bytes per rank (largest rank)", fmt=fmt),
    ]  # fmt: skip
