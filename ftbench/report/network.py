"""The network preflight in a report: each run's transport and peak busbw, busbw against message size,
and whether the runs of a sweep (or the runs of their own) saw the same network.

Every multi-rank run starts with a collective bandwidth self-test (docs/roce.md, "Reading the network
preflight"), kept as `status.environment.network`. A sweep's throughputs compare configurations only
if the network under them was the same: the runs *matched* when they all used one transport (with its
link layer) and each peak busbw lies within ±10 % of the median peak; otherwise the report names the
runs that differ. The figures are the trainer's, in GB/s of 10^9 bytes, never recomputed here.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ftbench.api.network import describe
from ftbench.api.network import transport_text as transport
from ftbench.api.sweep import PointRow
from ftbench.contracts.network import Collective, NetworkInEffect
from ftbench.report.data import RunMeasurement
from ftbench.report.plots import Figure, render_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# How far a run's peak busbw may lie from the median peak for the runs to count as matched.
MATCH_TOLERANCE = 0.10
BUSBW_LABEL = "bus bandwidth, busbw (GB/s)"
SIZE_LABEL = "message size S (allGather: the gathered total)"
COLUMN_HEADERS = ("transport", "peak busbw GB/s")
LINE_STYLES = {Collective.ALL_REDUCE: "-", Collective.ALL_GATHER: "--"}
LEGEND_LIMIT = 12  # lines; more would hide the plot


@dataclass(frozen=True)
class Preflight:
    """One run's preflight as the report names it: in sentences and legends (label), in tables (cells)."""

    label: str
    cells: tuple[str, ...]
    network: NetworkInEffect


def point_columns(row: PointRow) -> tuple[str, str]:
    """A sweep point's transport(s) and mean peak busbw, as plan_sweep put them in its row."""
    peak = row.peak_bus_bandwidth_gbps
    return row.transport or "", "" if peak is None else f"{peak:,.1f}"


def run_columns(run: RunMeasurement) -> tuple[str, str]:
    """A run's transport and peak busbw; empty cells without a preflight."""
    if run.network is None:
        return "", ""
    return transport(run.network), f"{run.network.peak_bus_bandwidth_gbps:,.1f}"


def size_text(size: int) -> str:
    """64 KiB, 1 MiB, 128 MiB; a size that is no whole KiB or MiB in bytes."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size:,} B"


def bandwidth_table(preflights: Sequence[Preflight]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """busbw per run and collective (rows) and message size (columns, every size any run timed); a
    size a run did not time (skipped for the time budget) is an empty cell."""
    sizes = sorted({s.size_bytes for p in preflights for s in p.network.bandwidth})
    rows = []
    for p in preflights:
        for collective in Collective:
            measured = {s.size_bytes: s.bus_bandwidth_gbps for s in p.network.bandwidth if s.collective == collective}
            if measured:
                cells = (f"{measured[s]:,.2f}" if s in measured else "" for s in sizes)
                rows.append((*p.cells, transport(p.network), collective.value, *cells))
    return (COLUMN_HEADERS[0], "collective", *(size_text(s) for s in sizes)), tuple(rows)


def agreement(preflights: Sequence[Preflight]) -> str:
    """Whether the runs saw the same network: one transport, each peak busbw within ±10 % of the median."""
    if len(preflights) == 1:
        only = preflights[0]
        return f"One run ({only.label}) has a network preflight: {describe(only.network)}. Nothing to compare."
    kinds = Counter(transport(p.network) for p in preflights)
    usual = kinds.most_common(1)[0][0]
    median = statistics.median(p.network.peak_bus_bandwidth_gbps for p in preflights)
    band = median * MATCH_TOLERANCE
    off = [p for p in preflights if abs(p.network.peak_bus_bandwidth_gbps - median) > band]
    head = f"the {len(preflights)} runs with a network preflight"
    if len(kinds) == 1 and not off:
        return (f"Matched across {head}: transport {usual} in every run, peak busbw within ±10% of the median "
                f"{median:,.1f} GB/s.")  # fmt: skip
    problems = []
    if len(kinds) > 1:
        odd = ", ".join(f"{p.label} ({transport(p.network)})" for p in preflights if transport(p.network) != usual)
        problems.append(f"transport {usual} except {odd}")
    if off:
        far = ", ".join(f"{p.label} ({_peak_off(p.network, median)})" for p in off)
        problems.append(f"peak busbw outside ±10% of the median {median:,.1f} GB/s: {far}")
    return (f"Did not match across {head}: " + "; ".join(problems) + ". Throughputs of these runs compare the "
            "networks as much as the configurations.")  # fmt: skip


def _peak_off(network: NetworkInEffect, median: float) -> str:
    peak = network.peak_bus_bandwidth_gbps
    return f"{peak:,.1f} GB/s, {peak / median - 1:+.0%}" if median else f"{peak:,.1f} GB/s"


def figure(preflights: Sequence[Preflight], fmt: str = "png") -> Figure:
    """busbw against message size: a colour per run, solid allReduce, dashed allGather."""

    def draw(ax: Axes) -> None:
        import matplotlib

        palette = matplotlib.colormaps["tab10"]
        lines = 0
        for i, p in enumerate(preflights):
            for collective, style in LINE_STYLES.items():
                xy = sorted((s.size_bytes, s.bus_bandwidth_gbps) for s in p.network.bandwidth
                            if s.collective == collective)  # fmt: skip
                if xy:
                    lines += 1
                    ax.plot(*zip(*xy, strict=True), marker="o", linestyle=style, color=palette(i % 10),
                            label=f"{p.label} {collective.value}")  # fmt: skip
        from matplotlib.ticker import NullFormatter

        sizes = sorted({s.size_bytes for p in preflights for s in p.network.bandwidth})
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sizes, [size_text(s) for s in sizes])
        ax.set_ylim(bottom=0)
        if lines > LEGEND_LIMIT:
            ax.text(0.01, 0.97, f"{lines} lines: the table names them", transform=ax.transAxes, va="top",
                    color="0.35")  # fmt: skip
            _no_legend(ax)

    return render_figure(draw, name="network-busbw", title="Network preflight: busbw against message size",
                         xlabel=SIZE_LABEL, ylabel=BUSBW_LABEL, fmt=fmt)  # fmt: skip


def _no_legend(ax: Axes) -> None:
    """Unlabel the lines so render_figure draws no legend."""
    for line in ax.get_lines():
        line.set_label("_" + str(line.get_label()))


def sweep_preflights(runs: Sequence[RunMeasurement]) -> list[Preflight]:
    """A sweep's runs that had a preflight, named by point and repeat (the table's first cells)."""
    return [
        Preflight(f"point {r.point} repeat {r.repeat}", (str(r.point), str(r.repeat)), r.network)
        for r in runs
        if r.network is not None
    ]


def run_preflights(runs: Sequence[RunMeasurement]) -> list[Preflight]:
    """Runs of their own that had a preflight, named by run."""
    return [Preflight(r.name, (r.name,), r.network) for r in runs if r.network is not None]
