"""Writing a report: `report.md` beside its plot files, and one self-contained `report.html`.

The document is built once as a list of blocks (headings, paragraphs, tables, figures) and then
written twice, so the Markdown and the HTML cannot say different things. The HTML carries its
plots inside (PNG as base64 data URIs, SVG inline) and links nothing outside: it can be mailed,
attached to an issue or opened offline and still show everything.
"""

from __future__ import annotations

import base64
import html
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ftbench.api.effective import devices_label, per_device_batch_size
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import PointRow
from ftbench.catalog import load_catalog
from ftbench.report import front, prediction, scaling
from ftbench.report import network as net
from ftbench.report.data import ReportData, RunMeasurement, SweepData
from ftbench.report.effects import effect_rows, toggle_effects
from ftbench.report.plots import RUN_LABEL, Figure, figures, render_figure, run_points, sweep_points
from ftbench.stats import text
from ftbench.sweep.schedule import within_noise_of


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Plot:
    figure: Figure
    file: str  # beside report.md


Block = Heading | Paragraph | Table | Plot

# Cells are cut so a long failure message keeps the table readable; the full text is in the store.
NOTE_LIMIT = 100


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "report"


def _cut(text: str) -> str:
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 1] + "…"


def _best(sweep: SweepData) -> PointRow | None:
    measured = [r for r in sweep.rows if r.phase in ("Succeeded", "Reused") and r.objective is not None]
    if not measured:
        return None
    pick = max if sweep.direction == "max" else min
    return pick(measured, key=lambda r: r.objective or 0.0)


def _sweep_table(sweep: SweepData) -> Table:
    varied = list(dict.fromkeys(k for r in sweep.rows for k in r.values))
    network = any(r.transport for r in sweep.rows)
    predicted = any(r.predicted_memory_percent is not None for r in sweep.rows)
    catalog = load_catalog()
    throughput = [
        prediction.point_throughput_columns(sweep.point_specs.get(r.point), sweep.runs, r.point, catalog)
        for r in sweep.rows
    ]
    rated = any(cells[0] for cells in throughput)
    rows = []
    for r, rate in zip(sweep.rows, throughput, strict=True):
        spec = sweep.point_specs.get(r.point)
        rows.append((
            str(r.point), *(str(r.values.get(k, "")) for k in varied),
            str(per_device_batch_size(spec)) if spec else "",
            *([] if "numberGpus" in varied else [devices_label(spec) if spec else ""]),
            str(r.phase), f"{r.repeats_done}", _num(r.train_tokens_per_second), _ci(r),
            _num(r.dataset_tokens_per_second),
            *([_num(r.predicted_memory_percent)] if predicted else []), *(rate if rated else ()),
            text.figure(r.gpu_memory_peak_percent, measured=r.train_tokens_per_second is not None),
            text.figure(r.mfu_percent, 2, measured=r.train_tokens_per_second is not None),
            "" if r.step_time_cv_across_repeats is None else f"{r.step_time_cv_across_repeats:.1%}",
            *(net.point_columns(r) if network else ()),
            _cut(r.message), ", ".join(r.experiments),
        ))  # fmt: skip
    gpus = () if "numberGpus" in varied else ("devices",)
    headers = ("point", *varied, "per-device batch", *gpus, "phase", "repeats", "tokens/s",
               f"{sweep.objective} 95% CI", "dataset tokens/s",
               *(("predicted GPU mem % (estimate)",) if predicted else ()),
               *(prediction.THROUGHPUT_HEADERS if rated else ()), "peak GPU mem %", "MFU %", "step-time CV", *(net.COLUMN_HEADERS if network else ()), "note",
               "runs")  # fmt: skip
    return Table(headers, tuple(rows))


def _ci(row: PointRow) -> str:
    if row.objective_ci95_low is None or row.objective_ci95_high is None:
        return ""
    return f"{_num(row.objective_ci95_low)}-{_num(row.objective_ci95_high)}"


def _runs_table(runs: Sequence[RunMeasurement]) -> Table:
    network = any(r.network is not None for r in runs)
    predicted = any(r.metrics is not None and r.metrics.predicted_peak_bytes is not None for r in runs)
    catalog = load_catalog()
    specs = [_spec(run) for run in runs]
    throughput = [prediction.throughput_columns(spec, run, catalog) for spec, run in zip(specs, runs, strict=True)]
    rated = any(cells[0] for cells in throughput)
    rows = []
    for run, spec, rate in zip(runs, specs, throughput, strict=True):
        m = run.metrics
        rows.append((
            run.name, spec.experiment.value.removeprefix("finetune_") if spec else "", spec.model if spec else "",
            devices_label(spec) if spec else "", str(spec.batch_size) if spec else "",
            str(per_device_batch_size(spec)) if spec else "", str(spec.model_max_length) if spec else "", run.phase,
            _num(m.train_tokens_per_second if m else None),
            text.figure(m.gpu_memory_utilization_peak_percent if m else None, measured=m is not None),
            text.figure(m.mfu_percent if m else None, 2, measured=m is not None), _num(m.step_time_p50_seconds if m else None, 3),
            text.steady_short(m) if m else "", text.flag_names(m), text.rows_trained(m),
            *(prediction.run_columns(m) if predicted else ()), *(rate if rated else ()),
            *(net.run_columns(run) if network else ()),
        ))  # fmt: skip
    headers = ("run", "experiment", "model", "devices", "batch", "per-device batch", "seq length", "phase", "tokens/s",
               "peak GPU mem %", "MFU %", "step p50 s", "steady tokens/s ±95%", "noise", "rows trained",
               *(prediction.COLUMN_HEADERS if predicted else ()), *(prediction.THROUGHPUT_HEADERS if rated else ()),
               *(net.COLUMN_HEADERS if network else ()))  # fmt: skip
    return Table(headers, tuple(rows))


def _spec(run: RunMeasurement) -> FineTuneExperimentSpec | None:
    try:
        return FineTuneExperimentSpec.model_validate(run.spec)
    except ValueError:
        return None


def _plots(prefix: str, figs: Sequence[Figure]) -> list[Block]:
    return [Plot(f, f"{prefix}-{f.name}.{f.fmt}") for f in figs]


def _sweep_blocks(sweep: SweepData, fmt: str) -> list[Block]:
    blocks: list[Block] = [Heading(f"Sweep {sweep.name}")]
    if sweep.issues:
        return [*blocks, Paragraph("The sweep is invalid, no point ran: " + "; ".join(sweep.issues))]
    counts = Counter(str(r.phase) for r in sweep.rows)
    summary = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()))
    blocks.append(Paragraph(f"{len(sweep.rows)} points ({summary or 'no table yet'}); "
                            f"objective: {sweep.direction} {sweep.objective}."))  # fmt: skip
    if sweep.device_hours is not None:
        line = sweep.device_hours.summary()
        blocks.append(Paragraph(line[:1].upper() + line[1:] + "."))
    if (best := _best(sweep)) is not None:
        values = ", ".join(f"{k}={v}" for k, v in best.values.items())
        text = f"Best: point {best.point} ({values}) with {sweep.objective} {_num(best.objective)}"
        if best.objective_ci95_low is not None and best.objective_ci95_high is not None:
            text += f" (95% interval {_num(best.objective_ci95_low)}-{_num(best.objective_ci95_high)})"
        measured = [r for r in sweep.rows if r.phase in ("Succeeded", "Reused")]
        if ties := within_noise_of(best, measured):
            text += (f". Within noise of point{'s' * (len(ties) > 1)} {', '.join(map(str, ties))}: their intervals "
                     "overlap, so these points cannot be told apart; more repeats or longer runs would")  # fmt: skip
        elif best.objective_ci95_low is None:
            text += ". No interval: run repeats (or longer runs) to know whether it is ahead beyond the noise"
        if best.objective_ci95_low is not None and best.repeats_done == 1:
            text += (". With one repeat a point's interval is that run's step-to-step noise only; differences "
                     "between runs (bench/noise.py) need repeats")  # fmt: skip
        blocks.append(Paragraph(text + "."))
    blocks.append(_sweep_table(sweep))
    blocks += _plots(_slug(sweep.name), figures(sweep_points(sweep), fmt))
    blocks += _front_blocks(sweep, fmt)
    blocks += _effect_blocks(sweep)
    blocks += _network_blocks(net.sweep_preflights(sweep.runs), ("point", "repeat"), _slug(sweep.name), fmt)
    return blocks + _scaling_blocks(sweep, fmt)


def best_file(sweep: SweepData) -> str:
    return f"{_slug(sweep.name)}-best.yaml"


def _front_blocks(sweep: SweepData, fmt: str) -> list[Block]:
    """The Pareto front of the measured points (ftbench.report.front), predicted beside measured, and its plot."""
    measured = front.measured_points(sweep, load_catalog())
    if len(measured) < 2:
        return []
    on_front = front.pareto_front(measured)
    skipped = sum(1 for r in sweep.rows if str(r.phase) == "Skipped" and r.message.startswith("search: "))
    intro = (
        f"The points no other measured point beats on tokens/s, GPUs and memory headroom at once: {len(on_front)} of "
        f"{len(measured)} measured. Predicted tokens/s is ftbench's estimate for the point (docs/measurements.md)."
    )
    if skipped:
        intro += f" The search did not measure {skipped} points: the table's note says why for each."
    if _best(sweep) is not None:
        intro += f" The best point is written as a FineTuneExperiment: {best_file(sweep)}."
    rows = tuple(
        (
            str(p.point), ", ".join(f"{k}={v}" for k, v in p.values.items()), str(p.gpus), _num(p.tokens_per_second),
            _num(p.tokens_per_gpu), _num(p.predicted_tokens_per_second),
            "" if p.headroom_percent is None else _num(p.headroom_percent),
        )
        for p in on_front
    )  # fmt: skip
    headers = ("point", "values", "GPUs", "tokens/s", "tokens/s per GPU", "predicted tokens/s (estimate)",
               "memory headroom %")  # fmt: skip

    def draw(ax: Any) -> None:
        ax.scatter([p.gpus for p in measured], [p.tokens_per_gpu for p in measured], color="0.6", label="measured")
        ax.plot([p.gpus for p in on_front], [p.tokens_per_gpu for p in on_front], "o-", color="C0", label="front")
        predicted = [
            (p.gpus, p.predicted_tokens_per_second / p.gpus) for p in measured if p.predicted_tokens_per_second
        ]
        if predicted:
            ax.scatter(*zip(*predicted, strict=True), marker="x", color="C3", label="predicted (estimate)")

    figure = render_figure(draw, name="front", title="Pareto front: tokens/s per GPU against GPUs",
                           xlabel=front.XLABEL, ylabel=front.YLABEL, fmt=fmt)  # fmt: skip
    return [Heading(f"Pareto front of {sweep.name}", 3), Paragraph(intro), Table(headers, rows),
            *_plots(_slug(sweep.name), [figure])]  # fmt: skip


def _effect_blocks(sweep: SweepData) -> list[Block]:
    """What each varied field did (ftbench.report.effects), when any pair of points shows it."""
    effects = toggle_effects(sweep)
    if not effects:
        return []
    intro = (
        "Effect of each varied field: the ratio of a metric between points that differ in that field only "
        "(median over such pairs, and their range across the other fields). datasetTokensPerSecond compares "
        "packed and unpacked runs fairly; peakMemory is gpuMaxMemoryAllocatedBytes on GPUs, cpuPeakRssBytes on "
        f"CPU. Beyond noise: pairs whose {sweep.objective} 95% intervals do not overlap."
    )
    headers = ("field", "change", "metric", "pairs", "ratio (median)", "range", "beyond noise")
    return [Heading(f"Effects in {sweep.name}", 3), Paragraph(intro), Table(headers, effect_rows(effects))]


def _network_blocks(found: Sequence[net.Preflight], first: tuple[str, ...], prefix: str, fmt: str) -> list[Block]:
    """The network preflight of each run that had one (ftbench.report.network), and whether they matched."""
    if not found:
        return []
    headers, rows = net.bandwidth_table(found)
    return [
        Heading("Network preflight", 3),
        Paragraph(net.agreement(found) + " The table is busbw in GB/s per collective and message size, as nccl-tests "
                  "report it (docs/roce.md); small sizes measure latency, the largest ones the network."),
        Table((*first, *headers), rows),
        *_plots(prefix, [net.figure(found, fmt)]),
    ]  # fmt: skip


def _bytes(n: int) -> str:
    return f"{n:,}"


def _scaling_blocks(sweep: SweepData, fmt: str) -> list[Block]:
    """Seed 004's scaling study (ftbench.report.scaling), for sweeps over the number of ranks."""
    if not scaling.applies(sweep):
        return []
    rows = scaling.scaling_rows(sweep.runs)
    device = "CPU" if scaling.on_cpu(sweep) else "GPU"
    note = (
        "These are CPU figures: CPU ranks with gloo, one thread each, sharing this machine's cores; they show "
        "that sharding and scaling work and what each rank holds, not GPU speed. "
        if device == "CPU"
        else ""
    )
    blocks: list[Block] = [
        Heading("Scaling and per-rank memory", 3),
        Paragraph(
            note + "Efficiency = tokens/s at N / (N x tokens/s at 1 rank); ± is half the range over repeats. "
            "Bytes per rank are read from the running model and optimizer (the largest rank); "
            "share = parameter bytes per rank / the whole model's."
        ),
        Table(
            (
                "ranks",
                "configuration",
                "tokens/s",
                "±",
                "repeats",
                "efficiency",
                "param bytes/rank",
                "share",
                "optimizer bytes/rank",
            ),
            tuple(
                (
                    str(r.ranks),
                    r.config,
                    _num(r.tokens_per_second),
                    _num(r.spread),
                    str(r.repeats),
                    _num(r.efficiency, 2),
                    _bytes(r.parameter_bytes_per_rank),
                    _num(r.shard_fraction, 3),
                    _bytes(r.optimizer_bytes_per_rank),
                )
                for r in rows
            ),
        ),
    ]
    if trade := scaling.tradeoff(rows):
        blocks += [
            Paragraph(f"Strategy x offload at {trade[0].ranks} ranks:"),
            Table(
                ("configuration", "tokens/s", "±", "efficiency", "param bytes/rank", "optimizer bytes/rank"),
                tuple(
                    (
                        r.config,
                        _num(r.tokens_per_second),
                        _num(r.spread),
                        _num(r.efficiency, 2),
                        _bytes(r.parameter_bytes_per_rank),
                        _bytes(r.optimizer_bytes_per_rank),
                    )
                    for r in trade
                ),
            ),
        ]
    return blocks + _plots(_slug(sweep.name), scaling.figures(rows, device, fmt))


def document(data: ReportData, fmt: str = "png", now: datetime | None = None) -> list[Block]:
    """The report's blocks: a section per sweep, then the runs that belong to none."""
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    blocks: list[Block] = [Heading("ftbench report", 1), Paragraph(f"Runs from {data.source}, {when}.")]
    if not data.sweeps and not data.runs:
        blocks.append(Paragraph("No runs yet: try `ftbench run examples/quickstart.yaml` or `ftbench sweep`."))
    for sweep in data.sweeps:
        blocks += _sweep_blocks(sweep, fmt)
    if data.runs:
        blocks += [Heading("Runs outside sweeps"), _runs_table(data.runs)]
        blocks += _plots("runs", figures(run_points(data.runs), fmt, RUN_LABEL))
        blocks += _network_blocks(net.run_preflights(data.runs), ("run",), "runs", fmt)
    return blocks


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _each_block(
    blocks: Sequence[Block],
    heading: Callable[[Heading], str],
    paragraph: Callable[[Paragraph], str],
    table: Callable[[Table], str],
    plot: Callable[[Plot], str],
) -> list[str]:
    """Each block written by the function for its kind: the one walk Markdown and HTML share."""
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(heading(b))
        elif isinstance(b, Paragraph):
            out.append(paragraph(b))
        elif isinstance(b, Table):
            out.append(table(b))
        else:
            out.append(plot(b))
    return out


def _md_table(b: Table) -> str:
    lines = ["| " + " | ".join(map(_md_cell, b.headers)) + " |", "|" + "---|" * len(b.headers)]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in b.rows]
    return "\n".join(lines)


def markdown(blocks: Sequence[Block]) -> str:
    out = _each_block(
        blocks,
        heading=lambda b: f"{'#' * b.level} {b.text}",
        paragraph=lambda b: b.text,
        table=_md_table,
        plot=lambda b: f"![{b.figure.title}: {b.figure.ylabel} vs {b.figure.xlabel}]({b.file})",
    )
    return "\n\n".join(out) + "\n"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure.plot { display: inline-block; margin: 0.5em; vertical-align: top; }
figure.plot img, figure.plot svg { max-width: 100%; height: auto; }
"""


def _html_figure(plot: Plot) -> str:
    f = plot.figure
    alt = html.escape(f"{f.title}: {f.ylabel} vs {f.xlabel}", quote=True)
    if f.fmt == "svg":
        text = f.data.decode()
        body = text[text.index("<svg") :]  # inline: the XML prolog and DOCTYPE are not HTML
    else:
        body = f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(f.data).decode()}">'
    return (f'<figure class="plot" data-name="{html.escape(f.name)}" data-xlabel="{html.escape(f.xlabel)}" '
            f'data-ylabel="{html.escape(f.ylabel)}">{body}</figure>')  # fmt: skip


def _inline(text: str) -> str:
    """Paragraph text with Markdown's `code` spans, the only markup the blocks use."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _html_table(b: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in b.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def html_page(blocks: Sequence[Block]) -> str:
    out = _each_block(
        blocks,
        heading=lambda b: f"<h{b.level}>{html.escape(b.text)}</h{b.level}>",
        paragraph=lambda b: f"<p>{_inline(b.text)}</p>",
        table=_html_table,
        plot=_html_figure,
    )
    title = "ftbench report"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(out) + "\n</body></html>\n")  # fmt: skip


def write_report(data: ReportData, out_dir: Path, fmt: str = "png") -> list[Path]:
    """Write report.md, its plot files and report.html into `out_dir`; the paths written."""
    blocks = document(data, fmt)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for b in blocks:
        if isinstance(b, Plot):
            (out_dir / b.file).write_bytes(b.figure.data)
            written.append(out_dir / b.file)
    for sweep in data.sweeps:
        if (best := _best(sweep)) is not None:
            doc = front.best_experiment(sweep, best.point, f"{_slug(sweep.name)[:50]}-best".lower())
            if doc is not None:
                (out_dir / best_file(sweep)).write_text(yaml.safe_dump(doc, sort_keys=False))
                written.append(out_dir / best_file(sweep))
    (out_dir / "report.md").write_text(markdown(blocks))
    (out_dir / "report.html").write_text(html_page(blocks))
    return [out_dir / "report.md", out_dir / "report.html", *written]
