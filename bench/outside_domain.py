"""How much worse a prediction gets outside what calibrated it, where the fleet can say (issue 60 item 2).

    .venv/bin/python bench/outside_domain.py [--write-docs]

A prediction outside the calibration quotes the model-left-out band times OUTSIDE_FACTOR (2, a stated guess;
ftbench.predict.fleet_accuracy). Two of its four ways can be measured on sample A, by holding out what the way
varies and fitting the constants without it: an engine release (each release's rows predicted by constants
fitted on the other releases), and scale (the rows on more than 8 GPUs predicted by constants fitted on the rows
on 8 or fewer). Each is set beside the grouped-fold error of the same rows. The other two, a GPU family and an
architecture, have no held-out rows here (every clean row is an A100; an unseen architecture is at least an
unseen model, the model-left-out band), so the factor stays a guess for them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fleet
import fleet_throughput as ft

from ftbench.predict.fit_folds import grouped_folds, p90_or_none
from ftbench.predict.fit_memory import fit_constants, held_out
from ftbench.predict.fit_throughput import fit_points, held_out_errors

SECTION = "outside-domain"
LARGE = 8  # GPUs: "scale" holds out the rows above it


def _cell(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.1f} / {p90_or_none(values) or 0.0:.1f} {unit}"


def throughput_rows(pts: list[Any]) -> list[tuple[str, str, str, int]]:
    specs = {p.line: p.spec for p in pts}
    grouped = dict(zip((p.line for p in pts), held_out_errors(pts, grouped_folds(specs)), strict=True))
    releases = {line: s["fmsHfTuningVersion"] for line, s in specs.items()}
    by_release = dict(zip((p.line for p in pts), held_out_errors(pts, releases), strict=True))
    small = fit_points([p for p in pts if p.gpus <= LARGE])
    large = [p for p in pts if p.gpus > LARGE]
    scaled = {p.line: p.error(p.model.step_tokens / p.model.seconds(small).step) for p in large}

    def pct(errors: dict[int, float], lines: list[int]) -> list[float]:
        return [100 * errors[line] for line in lines]

    every = [p.line for p in pts]
    big = [p.line for p in large]
    return [
        ("engine release left out", _cell(pct(by_release, every), "%"), _cell(pct(grouped, every), "%"), len(every)),
        (f"scale: fitted on <= {LARGE} GPUs, rows on more", _cell(pct(scaled, big), "%"),
         _cell(pct(grouped, big), "%"), len(big)),
    ]  # fmt: skip


def _fitted_on_small(judged: list[Any], scale: dict[int, str]) -> list[Any]:
    """The large rows' device-level peaks sized by constants fitted on the small rows only."""
    import dataclasses

    from ftbench.api.profile import DEFAULT_GPU_MEMORY
    from ftbench.predict.device_memory import device_memory

    constants = fit_constants([j for j in judged if scale[j.line] == "small"])
    return [
        dataclasses.replace(j, device=device_memory(j.prediction, DEFAULT_GPU_MEMORY[j.spec["gpuModel"]], constants))
        if scale[j.line] == "large" and j.prediction is not None
        else j
        for j in judged
    ]


def memory_rows(judged: list[Any]) -> list[tuple[str, str, str, int]]:
    specs = {j.line: j.spec for j in judged}
    grouped = held_out(judged, grouped_folds(specs))
    by_release = held_out(judged, {line: s["fmsHfTuningVersion"] for line, s in specs.items()})
    scale = {line: "large" if int(s["numberGpus"]) > LARGE else "small" for line, s in specs.items()}
    small_fit = _fitted_on_small(judged, scale)

    def errors(rows: list[Any], keep: Callable[[Any], bool]) -> list[float]:
        return [abs(j.device.percent - j.measured_percent) for j in rows
                if j.device is not None and j.measured_percent is not None and keep(j)]  # fmt: skip

    def large(j: Any) -> bool:
        return scale[j.line] == "large"

    return [
        ("engine release left out", _cell(errors(by_release, lambda _: True), "pp"),
         _cell(errors(grouped, lambda _: True), "pp"), len(errors(grouped, lambda _: True))),
        (f"scale: fitted on <= {LARGE} GPUs, rows on more", _cell(errors(small_fit, large), "pp"),
         _cell(errors(grouped, large), "pp"), len(errors(grouped, large))),
    ]  # fmt: skip


def report(store: Path = fleet.STORE) -> str:
    head = (
        "| held out | what | median / p90 error | grouped 5-fold, same rows | rows |\n| --- | --- | --- | --- | --- |"
    )
    lines = [
        f"| {way} | tokens/s | {out} | {grouped} | {n} |" for way, out, grouped, n in throughput_rows(ft.points(store))
    ]
    lines += [
        f"| {way} | device memory | {out} | {grouped} | {n} |"
        for way, out, grouped, n in memory_rows(fleet.judge(store))
    ]
    return head + "\n" + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true", help="also into docs/benchmarks.md")
    args = parser.parse_args()
    ft.publish(SECTION, report(), args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
