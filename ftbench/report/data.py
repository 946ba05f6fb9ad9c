"""What a report is drawn from, the same whether the runs are in the local store or on a cluster.

A sweep's table is `plan_sweep`'s (`PointRow`s, Skipped and Reused points included); the plots also
need each point's spec (per-device batch, GPU count) and each repeat's own metrics (the spread
across repeats), which the table folds away. Both loaders turn their source into these plain
records, so the plots and the renderer never ask where a number came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import DeviceHours, FineTuneSweepSpec, PointRow
from ftbench.catalog import Catalog
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.results import Metrics, TrainerResult
from ftbench.local.store import ResultsStore, RunRecord
from ftbench.local.sweeps import record_network, stored_sweep, sweep_runs
from ftbench.stats.results import mean_of_repeats
from ftbench.sweep.points import Expansion
from ftbench.sweep.schedule import RunState


@dataclass(frozen=True)
class RunMeasurement:
    """One run: a sweep point's repeat (a child experiment, a store row) or a run of its own."""

    name: str  # the store's run id, or the FineTuneExperiment's name
    spec: Mapping[str, Any]  # FineTuneExperiment spec, wire form
    phase: str  # Succeeded, GpuOom, Failed, Invalid, Running...
    metrics: Metrics | None
    point: int | None = None
    repeat: int | None = None
    network: NetworkInEffect | None = None  # the network preflight, when the run had one


@dataclass(frozen=True)
class SweepData:
    """One sweep: its table, each point's spec and every run that measured a point."""

    name: str
    objective: str
    direction: str
    rows: tuple[PointRow, ...]
    point_specs: Mapping[int, FineTuneExperimentSpec]  # valid points only
    runs: tuple[RunMeasurement, ...]
    issues: tuple[str, ...] = ()  # why a structurally invalid sweep has no table
    device_hours: DeviceHours | None = None  # status.deviceHours (or the local plan's)


@dataclass(frozen=True)
class ReportData:
    source: str  # where the runs were read, for the report's first line
    sweeps: tuple[SweepData, ...] = ()
    runs: tuple[RunMeasurement, ...] = field(default_factory=tuple)  # runs in no sweep

    def only(self, sweep: str) -> ReportData:
        """This one sweep, without the others or the runs of their own (NotFound when absent)."""
        found = tuple(s for s in self.sweeps if s.name == sweep)
        if not found:
            known = ", ".join(s.name for s in self.sweeps) or "none"
            raise NotFound(f"no sweep {sweep!r} in {self.source} (sweeps: {known})")
        return ReportData(self.source, found)


class NotFound(LookupError):
    """The named sweep is not in the source (the CLI turns this into a usage error)."""


def _phase(state: RunState) -> str:
    return "GpuOom" if state.gpu_oom else str(state.phase or "Pending")


def _record_metrics(record: RunRecord) -> Metrics | None:
    """The mean over the results with metrics (a run's repeats or trials; the store's headline rule,
    `ResultsStore.record`), with the intervals across them where there are several."""
    measured = [r.metrics for r in map(TrainerResult.model_validate, record.results) if r.metrics is not None]
    return mean_of_repeats(measured) if measured else None


def _record_phase(record: RunRecord) -> str:
    oom = any(r.get("outcome") == "GpuOom" for r in record.results)
    return "GpuOom" if oom else record.status


def sweep_data(
    name: str,
    spec: FineTuneSweepSpec,
    expansion: Expansion,
    rows: Sequence[PointRow],
    runs: Sequence[RunState],
    device_hours: DeviceHours | None = None,
) -> SweepData:
    """Assemble one sweep from its expansion, table and observed runs (both sources call this)."""
    specs = {p.index: p.spec for p in expansion.points if p.spec is not None}
    wires = {p.index: p.wire for p in expansion.points}
    measured = tuple(
        RunMeasurement(r.name, wires.get(r.point, {}), _phase(r), r.metrics, r.point, r.repeat, r.network)
        for r in sorted(runs, key=lambda r: (r.point, r.repeat))
    )
    return SweepData(
        name=name,
        objective=spec.objective.metric,
        direction=spec.objective.direction.value,
        rows=tuple(rows),
        point_specs=specs,
        runs=measured,
        issues=tuple(str(i) for i in expansion.issues),
        device_hours=device_hours,
    )


def from_store(store: ResultsStore, catalog: Catalog, sweep: str | None = None) -> ReportData:
    """Every sweep and run of the local store, or one sweep (NotFound when the store lacks it)."""
    names = [s.name for s in store.sweeps()]
    sweeps = []
    for name in names:
        local = stored_sweep(store, name, catalog)
        assert local is not None  # listed above
        rows = local.plan.rows if local.plan is not None else ()
        hours = local.plan.device_hours if local.plan is not None else None
        sweeps.append(sweep_data(name, local.spec, local.expansion, rows, sweep_runs(store, name), hours))
    plain = tuple(
        RunMeasurement(r.id, r.spec, _record_phase(r), _record_metrics(r), network=record_network(r))
        for r in store.runs()
        if r.sweep is None or r.sweep not in names
    )
    data = ReportData(source=f"local results store {store.path}", sweeps=tuple(sweeps), runs=plain)
    return data.only(sweep) if sweep is not None else data
