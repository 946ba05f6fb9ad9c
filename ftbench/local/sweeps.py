"""A sweep as the local results store sees it: its runs as `RunState`s, reuse candidates, the plan.

`ftbench sweep` and `ftbench report` read a sweep through here, so the table a report shows is the
one `plan_sweep` computes from the same rows, Skipped and Reused points included.
A run that did not end (`Running` left by a killed process, `Interrupted` by Ctrl-C) does not
count: `ftbench sweep --resume` runs that point again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import Catalog
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.outcomes import FINISHED, OUTCOMES, Phase
from ftbench.contracts.results import Metrics, TrainerResult
from ftbench.local.store import ResultsStore, RunRecord
from ftbench.sweep.points import Expansion, SweepPoint, expand
from ftbench.sweep.schedule import ReuseCandidate, RunState, SweepPlan, plan_sweep, reuse_key

# Locally every run uses this machine's environment for its engine: the "image" of a reuse key.
LOCAL_IMAGE = "local"


def _results(record: RunRecord) -> list[TrainerResult]:
    return [TrainerResult.model_validate(r) for r in record.results]


def record_network(record: RunRecord) -> NetworkInEffect | None:
    """The run's network preflight (the first result that has one: every trial ran on the same pods)."""
    return next((r.environment.network for r in _results(record) if r.environment and r.environment.network), None)


def _finished_phase(record: RunRecord) -> Phase | None:
    phase = Phase(record.status) if record.status in Phase.__members__.values() else None
    return phase if phase in FINISHED else None


def run_state(record: RunRecord) -> RunState | None:
    """The store's row as the planner reads a child; None for a run that did not end."""
    phase = _finished_phase(record)
    if phase is None or record.point is None or record.repeat is None:
        return None
    results = _results(record)
    first = results[0] if results else None
    reason = OUTCOMES[first.outcome].status_reason if first is not None else ""
    message = f"{first.error.type}: {first.error.message}" if first is not None and first.error else ""
    metrics = next((r.metrics for r in results if r.metrics is not None), None)
    return RunState(record.id, record.point, record.repeat, phase, reason, message, metrics, record_network(record))


def sweep_runs(store: ResultsStore, name: str) -> list[RunState]:
    """The sweep's finished runs; the newest row wins where a point's repeat ran more than once."""
    latest: dict[tuple[int, int], RunState] = {}
    for record in store.runs(sweep=name):
        state = run_state(record)
        if state is not None:
            latest[(state.point, state.repeat)] = state
    return list(latest.values())


def reuse_candidates(store: ResultsStore, name: str, points: Sequence[SweepPoint]) -> dict[int, ReuseCandidate]:
    """Points whose spec (defaults filled in) an earlier Succeeded run outside this sweep measured."""
    wanted = {reuse_key(p.spec, LOCAL_IMAGE): p.index for p in points if p.spec is not None}
    found: dict[int, ReuseCandidate] = {}
    for record in store.runs():
        if record.sweep == name or record.status != Phase.SUCCEEDED.value:
            continue
        metrics: Metrics | None = next((r.metrics for r in _results(record) if r.metrics is not None), None)
        key = reuse_key(FineTuneExperimentSpec.model_validate(record.spec), LOCAL_IMAGE)
        if metrics is not None and key in wanted:
            found[wanted[key]] = ReuseCandidate(record.id, metrics)
    return found


@dataclass(frozen=True)
class LocalSweep:
    """A stored sweep, expanded and planned from the store's rows."""

    name: str
    spec: FineTuneSweepSpec
    expansion: Expansion
    plan: SweepPlan | None  # None when the sweep is structurally invalid


def local_sweep(
    store: ResultsStore, name: str, spec: FineTuneSweepSpec, catalog: Catalog, *, ran: bool = False
) -> LocalSweep:
    """Plan `spec` against the store. Locally runs go one at a time (parallelism 1): one machine.
    `ran`: a stored sweep being reported (see `expand`)."""
    expansion = expand(spec, catalog, ran=ran)
    if not expansion.ok:
        return LocalSweep(name, spec, expansion, None)
    reuse = reuse_candidates(store, name, expansion.points) if spec.reuse else {}
    sequential = spec.model_copy(update={"parallelism": 1})
    plan = plan_sweep(sequential, expansion.points, sweep_runs(store, name), reuse)
    return LocalSweep(name, spec, expansion, plan)


def stored_sweep(store: ResultsStore, name: str, catalog: Catalog) -> LocalSweep | None:
    """A sweep this store ran, as it stands now (for `ftbench report`)."""
    record = store.sweep(name)
    if record is None:
        return None
    return local_sweep(store, name, FineTuneSweepSpec.model_validate(record.spec), catalog, ran=True)
