"""Two runs side by side: what differs in their specs, and each headline metric with B/A - 1.

Before/after questions ("did the new release, the other dtype, the bigger batch help?") compare two
runs of the local store; the spec rows show what changed so a difference is not read against the
wrong cause. A run with several results (the stability experiment's trials) counts as their mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ftbench.contracts.results import TrainerResult
from ftbench.local.store import RunRecord

# The metrics shown (wire names): throughput, time per step, utilization, memory, then the run's size.
HEADLINE_METRICS = (
    "trainTokensPerSecond",
    "trainTokensPerGpuPerSecond",
    "datasetTokensPerSecond",
    "steadyStateTokensPerSecond",
    "trainSamplesPerSecond",
    "stepTimeP50Seconds",
    "stepTimeP95Seconds",
    "stepTimeCv",
    "mfuPercent",
    "gpuComputeUtilizationAvgPercent",
    "gpuMemoryUtilizationPeakPercent",
    "gpuMaxMemoryAllocatedBytes",
    "gpuPowerAvgWatts",
    "cpuMemoryUtilizationPercent",
    "trainRuntimeSeconds",
    "trainSteps",
)


class RunLookupError(LookupError):
    """A run key that names no run, or several (the CLI prints it as a usage error)."""


def find_run(runs: Sequence[RunRecord], key: str) -> RunRecord:
    """The run with id `key`, else the one id starting with it, else the one run named `key`."""
    if exact := [r for r in runs if r.id == key]:
        return exact[0]
    for matches, what in (([r for r in runs if r.id.startswith(key)], "run ids starting with"),
                          ([r for r in runs if r.name == key], "runs named")):  # fmt: skip
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(r.id for r in matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise RunLookupError(f"{len(matches)} {what} {key!r}: {ids}; give a run id")
    raise RunLookupError(f"no run {key!r}: `ftbench results` lists the run ids")


def mean_metrics(run: RunRecord) -> tuple[dict[str, float], int]:
    """The mean of each numeric metric over the run's results with metrics, and how many there were."""
    found = [r.metrics.model_dump(by_alias=True) for r in map(TrainerResult.model_validate, run.results) if r.metrics]
    numeric = {k for m in found for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {k: statistics.fmean(float(m[k]) for m in found) for k in numeric}, len(found)


def _flat(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def relative(a: float | None, b: float | None) -> str:
    """B/A - 1 as a signed percentage; empty where it means nothing (a missing value, A = 0)."""
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a - 1:+.1%}"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


@dataclass(frozen=True)
class Comparison:
    rows: tuple[tuple[str, str, str, str], ...]  # (what, A, B, B/A - 1)


def compare(a: RunRecord, b: RunRecord) -> Comparison:
    """Identity rows, the spec fields that differ, then every headline metric either run has."""
    (ma, na), (mb, nb) = mean_metrics(a), mean_metrics(b)
    rows: list[tuple[str, str, str, str]] = [
        ("run", a.id, b.id, ""),
        ("name", a.name, b.name, ""),
        ("status", a.status, b.status, ""),
    ]
    if na > 1 or nb > 1:
        rows.append(("results averaged", str(na), str(nb), ""))
    sa, sb = _flat(a.spec), _flat(b.spec)
    rows += [(f"spec.{k}", _fmt(sa.get(k)), _fmt(sb.get(k)), "") for k in sorted(sa.keys() | sb.keys())
             if sa.get(k) != sb.get(k)]  # fmt: skip
    for metric in HEADLINE_METRICS:
        va, vb = ma.get(metric), mb.get(metric)
        if va is not None or vb is not None:
            rows.append((metric, _fmt(va), _fmt(vb), relative(va, vb)))
    return Comparison(tuple(rows))
