"""The report's plots: throughput, peak GPU memory with the OOM frontier, MFU, step-time spread.

Every plot has the per-device batch (or the point) on x, one series per configuration that is not
the batch (GPU count first, then the sweep's other varied values), so "does a bigger batch per GPU
pay off, and where does it stop fitting" reads off one figure per GPU count. matplotlib is imported
inside the functions with the Agg backend: `import ftbench` stays light and no display is needed.
A plot with nothing to show (CPU runs have no GPU memory or MFU) still renders, with a line saying
why, so a report never fails on a quantity the runs could not measure.
"""

from __future__ import annotations

import io
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ftbench.api.effective import devices_label, per_device_batch_size
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.contracts.results import Metrics
from ftbench.report.data import RunMeasurement, SweepData
from ftbench.stats.results import applicable, metric_interval

if TYPE_CHECKING:
    from matplotlib.axes import Axes

FORMATS = ("png", "svg")
# The fields a series label leaves out: the batch is the x axis, the GPU count leads the label.
X_FIELDS = frozenset({"batchSize", "numberGpus"})
OUT_OF_MEMORY = ("GpuOom", "Skipped")

BATCH_LABEL = "per-device batch (samples per GPU or CPU rank per step)"
TOKENS_LABEL = "train tokens/s (all devices)"
MEMORY_LABEL = "peak GPU memory (% of device memory)"
MFU_LABEL = "model FLOPs utilization, MFU (%)"
POINT_LABEL = "point (numbered as in the table)"
RUN_LABEL = "first run of each spec (the runs of one spec are its repeats)"
STEP_LABEL = "median step time per repeat (s)"


@dataclass(frozen=True)
class PlotPoint:
    """One configuration as the plots see it: where it sits on x, its series, what it measured."""

    series: str
    label: str  # names the point on the spread plot's x axis
    batch: int  # per-device batch
    phase: str
    tokens_per_second: float | None = None
    memory_peak_percent: float | None = None
    memory_predicted_percent: float | None = None  # the memory prediction's (status.prediction), an estimate
    mfu_percent: float | None = None
    step_times: tuple[float, ...] = ()  # each successful repeat's median step time
    tokens_ci95: tuple[float, float] | None = None  # 95% interval of tokens_per_second (error bars)


@dataclass(frozen=True)
class Figure:
    """A rendered plot; the labels travel with it for alt text and the tests."""

    name: str
    title: str
    xlabel: str
    ylabel: str
    fmt: str
    data: bytes


def _series(spec: FineTuneExperimentSpec, values: dict[str, Any]) -> str:
    others = [f"{k}={v}" for k, v in values.items() if k not in X_FIELDS]
    return ", ".join([devices_label(spec), *others])


def sweep_points(sweep: SweepData) -> list[PlotPoint]:
    """The sweep's valid points with their table numbers and each repeat's step time."""
    steps: dict[int, list[float]] = {}
    measured: dict[int, list[Metrics]] = {}
    for run in sweep.runs:
        if run.metrics is not None and run.point is not None:
            steps.setdefault(run.point, []).append(run.metrics.step_time_p50_seconds)
            measured.setdefault(run.point, []).append(run.metrics)
    found = []
    for row in sweep.rows:
        spec = sweep.point_specs.get(row.point)
        if spec is None:
            continue  # an invalid point has no configuration to place
        found.append(
            PlotPoint(
                series=_series(spec, row.values),
                label=str(row.point),
                batch=per_device_batch_size(spec),
                phase=str(row.phase),
                tokens_per_second=row.train_tokens_per_second,
                memory_peak_percent=row.gpu_memory_peak_percent,
                memory_predicted_percent=row.predicted_memory_percent,
                mfu_percent=row.mfu_percent,
                step_times=tuple(steps.get(row.point, ())),
                tokens_ci95=_tokens_ci95(measured.get(row.point, [])),
            )
        )
    return found


def run_points(runs: Iterable[RunMeasurement]) -> list[PlotPoint]:
    """Runs of their own: runs of one spec are the repeats of one point (named by its first run),
    in a series per GPU count, model, experiment and sequence length."""
    groups: dict[str, list[tuple[RunMeasurement, FineTuneExperimentSpec]]] = {}
    for run in runs:
        try:
            spec = FineTuneExperimentSpec.model_validate(run.spec)
        except ValueError:
            continue  # a row written by another ftbench version: listed in the table, not plotted
        groups.setdefault(json.dumps(spec.to_wire(), sort_keys=True), []).append((run, spec))
    found = []
    for group in groups.values():
        spec = group[0][1]
        measured = [r.metrics for r, _ in group if r.metrics is not None and r.phase == "Succeeded"]
        series = f"{devices_label(spec)}, {spec.model}, {spec.experiment.value.removeprefix('finetune_')}, " \
                 f"seq {spec.model_max_length}"  # fmt: skip
        found.append(
            PlotPoint(
                series=series,
                label=group[0][0].name,
                batch=per_device_batch_size(spec),
                phase="Succeeded" if measured else group[-1][0].phase,
                tokens_per_second=_mean([m.train_tokens_per_second for m in measured]),
                memory_peak_percent=max(
                    applicable(m.gpu_memory_utilization_peak_percent for m in measured), default=None
                ),
                mfu_percent=_mean(applicable(m.mfu_percent for m in measured)),
                step_times=tuple(m.step_time_p50_seconds for m in measured),
                tokens_ci95=_tokens_ci95(measured),
            )
        )
    return found


def _tokens_ci95(measured: Sequence[Metrics]) -> tuple[float, float] | None:
    interval = metric_interval(measured, "trainTokensPerSecond")
    return (max(0.0, interval.low), interval.high) if interval else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _measured(points: Sequence[PlotPoint]) -> list[PlotPoint]:
    return [p for p in points if p.phase in ("Succeeded", "Reused")]


def _by_series(points: Sequence[PlotPoint]) -> dict[str, list[PlotPoint]]:
    groups: dict[str, list[PlotPoint]] = {}
    for p in sorted(points, key=lambda p: (p.series, p.batch)):
        groups.setdefault(p.series, []).append(p)
    return groups


def _batch_axis(ax: Axes, points: Sequence[PlotPoint]) -> None:
    """Ticks at the batches that exist; a log2 axis when they span a factor of 4 or more."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    batches = sorted({p.batch for p in points})
    if not batches:
        return
    low, high = batches[0], batches[-1]
    if high >= 4 * low:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(low / 1.5, high * 1.5)
    else:  # the limits are set so a plot with nothing drawn still spans the batches
        pad = max(0.5, 0.08 * (high - low))
        ax.set_xlim(low - pad, high + pad)
    ax.set_xticks(batches)
    ax.xaxis.set_major_formatter(ScalarFormatter())


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.35", wrap=True)


def _line_plot(ax: Axes, points: Sequence[PlotPoint], value: Callable[[PlotPoint], float | None],
               colors: dict[str, Any], empty: str,
               error: Callable[[PlotPoint], tuple[float, float] | None] | None = None) -> float:  # fmt: skip
    """One line per series over the points with a positive value, with `error`'s (low, high) as
    error bars where a point has them; the largest value drawn (0: none)."""
    top = 0.0
    for series, group in _by_series(_measured(points)).items():
        xy = [(p.batch, v) for p in group if (v := value(p)) is not None and v > 0]
        if xy:
            ax.plot(*zip(*xy, strict=True), marker="o", color=colors[series], label=series)
            top = max(top, *(v for _, v in xy))
        bars = [(p.batch, v, e) for p in group if (v := value(p)) and error and (e := error(p))]
        if bars:
            ax.errorbar([b for b, _, _ in bars], [v for _, v, _ in bars], fmt="none", capsize=4,
                        ecolor=colors[series], yerr=[[v - e[0] for _, v, e in bars], [e[1] - v for _, v, e in bars]])  # fmt: skip
            top = max(top, *(e[1] for _, _, e in bars))
    if not top:
        _note(ax, empty)
    return top


def _from_zero(ax: Axes, top: float) -> None:
    """A y axis from 0 with room above the largest value (and 0..1 when nothing was drawn)."""
    ax.set_ylim(0, top * 1.12 if top else 1.0)


def _memory(ax: Axes, points: Sequence[PlotPoint], colors: dict[str, Any]) -> None:
    """Peak memory of the points that fit; the memory prediction's, where the operator made one, as a
    dotted line of hollow squares; GpuOom and Skipped points at 100% with their own markers, and per
    series a dashed line at the smallest per-device batch that did not fit."""
    _line_plot(ax, points, lambda p: p.memory_peak_percent, colors,
               "no GPU memory measured (CPU runs, or no run succeeded)")  # fmt: skip
    for series, group in _by_series(points).items():
        predicted = sorted((p.batch, p.memory_predicted_percent) for p in group if p.memory_predicted_percent)
        if predicted:
            ax.plot(*zip(*predicted, strict=True), linestyle=":", marker="s", fillstyle="none", color=colors[series],
                    label=f"{series} (predicted)")  # fmt: skip
    ax.axhline(100, color="0.6", linewidth=0.8)
    for phase, marker, face, name in (("GpuOom", "X", "tab:red", "ran out of GPU memory"),
                                      ("Skipped", "o", "none", "skipped: predicted OOM")):  # fmt: skip
        hit = [p for p in points if p.phase == phase]
        if hit:
            ax.scatter([p.batch for p in hit], [100] * len(hit), marker=marker, s=90, facecolors=face,
                       edgecolors="tab:red", zorder=3, label=name)  # fmt: skip
    frontier_named = False
    for series, group in _by_series(points).items():
        failing = [p.batch for p in group if p.phase in OUT_OF_MEMORY]
        if failing:
            ax.axvline(min(failing), color=colors[series], linestyle="--", linewidth=1.2,
                       label=None if frontier_named else "OOM frontier (smallest batch that did not fit)")  # fmt: skip
            frontier_named = True
    ax.set_ylim(0, max([110.0, *((p.memory_predicted_percent or 0.0) + 10 for p in points)]))


def _spread(ax: Axes, points: Sequence[PlotPoint]) -> None:
    """Each repeat's median step time per point, the mean as a bar, the CV written above."""
    measured = [p for p in points if p.step_times]
    for i, p in enumerate(measured):
        ax.scatter([i] * len(p.step_times), p.step_times, color="tab:blue", s=25, zorder=3)
        mean = statistics.fmean(p.step_times)
        ax.hlines(mean, i - 0.3, i + 0.3, color="0.3")
        if len(p.step_times) > 1:
            cv = statistics.stdev(p.step_times) / mean if mean else 0.0
            ax.annotate(f"CV {cv:.1%}", (i, max(p.step_times)), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8)  # fmt: skip
    crowded = len(measured) > 8 or any(len(p.label) > 6 for p in measured)
    ax.set_xticks(range(len(measured)), [p.label for p in measured], rotation=30 if crowded else 0,
                  ha="right" if crowded else "center")  # fmt: skip
    ax.set_xlim(-0.6, max(len(measured), 1) - 0.4)
    ax.margins(y=0.25)  # room for the CV labels under the title
    if not measured:
        _note(ax, "no successful repeat yet")
    elif all(len(p.step_times) < 2 for p in measured):
        ax.text(0.99, 0.03, "one repeat per point: no spread to measure", transform=ax.transAxes, ha="right",
                color="0.35")  # fmt: skip


def _render(draw: Callable[[Axes], None], *, name: str, title: str, xlabel: str, ylabel: str,
            fmt: str) -> Figure:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # svg.fonttype none keeps text as <text>: searchable, selectable, and checked by the browser test.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        try:
            draw(ax)
            ax.set_title(title, loc="left")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8, loc="best")
            fig.tight_layout()
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
        finally:
            plt.close(fig)
    return Figure(name, title, xlabel, ylabel, fmt, buffer.getvalue())


# The one way a report draws a figure (the scaling section uses it too).
render_figure = _render


def figures(points: Sequence[PlotPoint], fmt: str = "png", point_label: str = POINT_LABEL) -> list[Figure]:
    """The four plots of one sweep (or of the runs of their own, whose points are named otherwise)."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    colors = {s: palette(i % 10) for i, s in enumerate(sorted({p.series for p in points}))}

    def throughput(ax: Axes) -> None:
        _from_zero(ax, _line_plot(ax, points, lambda p: p.tokens_per_second, colors, "no successful run yet",
                                  lambda p: p.tokens_ci95))  # fmt: skip
        _batch_axis(ax, points)

    def memory(ax: Axes) -> None:
        _memory(ax, points, colors)
        _batch_axis(ax, points)

    def mfu(ax: Axes) -> None:
        _from_zero(ax, _line_plot(ax, points, lambda p: p.mfu_percent, colors,
                                  "no MFU measured (CPU runs, or a GPU without a known peak)"))  # fmt: skip
        _batch_axis(ax, points)

    return [
        _render(throughput, name="throughput", title="Training throughput (bars: 95% interval)", xlabel=BATCH_LABEL,
                ylabel=TOKENS_LABEL, fmt=fmt),
        _render(memory, name="memory", title="Peak GPU memory and the OOM frontier", xlabel=BATCH_LABEL,
                ylabel=MEMORY_LABEL, fmt=fmt),
        _render(mfu, name="mfu", title="Model FLOPs utilization", xlabel=BATCH_LABEL, ylabel=MFU_LABEL, fmt=fmt),
        _render(lambda ax: _spread(ax, points), name="step-time-spread", title="Step time across repeats",
                xlabel=point_label, ylabel=STEP_LABEL, fmt=fmt),
    ]  # fmt: skip
