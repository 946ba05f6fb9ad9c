"""Deciding what a sweep does next and what its table says, from what was observed.

`plan_sweep` is given the points and every run that exists (a child FineTuneExperiment on a
cluster, a row of the results store locally) and returns the runs to start now and the table.
It keeps no state of its own: after an operator restart the same observations give the same
decisions, so nothing is created twice and no count is lost.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ftbench.api.network import transport_text
from ftbench.api.prediction_report import PREDICTED_OOM_REASON
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import (
    FINISHED_POINT_PHASES,
    SEARCH_PER_GPU,
    BestPoint,
    DeviceHours,
    Direction,
    FineTuneSweepSpec,
    PointCounts,
    PointPhase,
    PointRow,
    SweepPhase,
)
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.outcomes import FINISHED, OUTCOMES, Phase
from ftbench.contracts.results import Metrics, Outcome
from ftbench.stats.device_time import DeviceTime, device_time
from ftbench.stats.intervals import Interval, separated
from ftbench.stats.results import applicable, metric_interval
from ftbench.sweep.frontier import memory_order, needs_at_least
from ftbench.sweep.points import SweepPoint
from ftbench.sweep.search import Trial, next_step, sweep_budget, sweep_candidates

OOM_REASON = OUTCOMES[Outcome.GPU_OOM].status_reason
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class RunState:
    """One run of a point as observed: a child experiment's phase, reason and results."""

    name: str
    point: int
    repeat: int
    phase: Phase | None = None  # None: created, not yet picked up
    reason: str = ""
    message: str = ""
    metrics: Metrics | None = None
    network: NetworkInEffect | None = None  # its network preflight (status.environment.network), for reports
    predicted_memory_percent: float | None = None  # status.prediction.fit.predictedPercent, for reports
    predicted_fits: bool | None = None  # status.prediction.fit.fits, for the sweep's predicted GPU-hours

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def gpu_oom(self) -> bool:
        return self.phase == Phase.INVALID and self.reason == OOM_REASON


@dataclass(frozen=True)
class ReuseCandidate:
    """A finished experiment whose effective spec and image equal a point's."""

    name: str
    metrics: Metrics


def reuse_key(spec: FineTuneExperimentSpec, image: str) -> str:
    """What must match for a result to be reused: the spec with every default filled in (so
    `batchSize: 4` written or defaulted compare equal) and the trainer image that ran it."""
    wire = FineTuneExperimentSpec.model_validate(spec.to_wire()).to_wire()
    wire["run"].pop("oomPrecheck", None)  # whether a prediction was checked first changes nothing measured
    canonical = json.dumps({"spec": wire, "image": image}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class NewRun:
    point: SweepPoint
    repeat: int


@dataclass(frozen=True)
class SweepPlan:
    to_create: tuple[NewRun, ...]
    rows: tuple[PointRow, ...]
    counts: PointCounts
    best: BestPoint | None
    phase: SweepPhase
    message: str
    device_hours: DeviceHours | None = None

    @property
    def progress(self) -> str:
        return f"{self.counts.finished}/{self.counts.total}"


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _cv(values: Sequence[float]) -> float | None:
    if len(values) < 2 or statistics.fmean(values) == 0:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def _point_phase(runs: Sequence[RunState], repeats: int) -> tuple[PointPhase, str]:
    if any(not r.finished for r in runs):
        return PointPhase.RUNNING, ""
    if oom := next((r for r in runs if r.gpu_oom), None):
        return PointPhase.GPU_OOM, oom.message or OUTCOMES[Outcome.GPU_OOM].default_message
    if len(runs) < repeats:
        return PointPhase.RUNNING, ""
    if failed := next((r for r in runs if r.phase == Phase.FAILED), None):
        return PointPhase.FAILED, f"{failed.name}: {failed.reason}: {failed.message}".strip(": ")
    if predicted := next((r for r in runs if r.phase == Phase.INVALID and r.reason == PREDICTED_OOM_REASON), None):
        return PointPhase.SKIPPED, f"not launched: {predicted.message}"
    if invalid := next((r for r in runs if r.phase == Phase.INVALID), None):
        return PointPhase.INVALID, f"{invalid.name}: {invalid.message}"
    return PointPhase.SUCCEEDED, ""


def _refused_phase(runs: Sequence[RunState], repeats: int, point: SweepPoint) -> tuple[PointPhase, str]:
    """A point validation refuses now: Invalid, unless it ran before (a store or a sweep from an
    ftbench whose validation let it through). What it measured stays in the table, under the
    phase it ended with and the reason it would be refused today; it never runs again."""
    why = "; ".join(str(i) for i in point.issues)
    if not runs:
        return PointPhase.INVALID, why
    phase, message = _point_phase(runs, repeats)
    if phase == PointPhase.RUNNING and all(r.finished for r in runs):
        return PointPhase.INVALID, why  # its remaining repeats would be refused
    return phase, "; ".join(filter(None, [f"ran before validation refused it ({why})", message]))


_IS_VALID = {
    PointPhase.SUCCEEDED: True,
    PointPhase.REUSED: True,
    PointPhase.GPU_OOM: False,
    PointPhase.INVALID: False,
    PointPhase.SKIPPED: False,
}


def _row(point: SweepPoint, phase: PointPhase, message: str, runs: Sequence[RunState], metrics: Sequence[Metrics],
         objective: str, names: Sequence[str]) -> PointRow:  # fmt: skip
    def mean_of(name: str) -> float | None:
        return _mean(applicable(getattr(m, name) for m in metrics))

    dumped = [m.model_dump(by_alias=True) for m in metrics]
    interval = metric_interval(metrics, objective)
    networks = [r.network for r in runs if r.network is not None]
    return PointRow(
        point=point.index,
        values=dict(point.values),
        phase=phase,
        is_valid=_IS_VALID.get(phase),
        message=message[:MESSAGE_LIMIT],
        repeats_done=sum(1 for r in runs if r.finished),
        train_tokens_per_second=mean_of("train_tokens_per_second"),
        dataset_tokens_per_second=mean_of("dataset_tokens_per_second"),
        gpu_memory_peak_percent=max(applicable(m.gpu_memory_utilization_peak_percent for m in metrics), default=None),
        predicted_memory_percent=max(
            (r.predicted_memory_percent for r in runs if r.predicted_memory_percent is not None), default=None
        ),
        mfu_percent=mean_of("mfu_percent"),
        step_time_cv_across_repeats=_cv([m.step_time_p50_seconds for m in metrics]),
        transport=", ".join(dict.fromkeys(transport_text(n) for n in networks)) or None,
        peak_bus_bandwidth_gbps=_mean([n.peak_bus_bandwidth_gbps for n in networks]),
        objective=_mean([float(v) for d in dumped if (v := d[objective]) is not None]),
        objective_ci95_low=interval.low if interval else None,
        objective_ci95_high=interval.high if interval else None,
        experiments=list(names),
    )


def _interval(row: PointRow) -> Interval | None:
    if row.objective is None or row.objective_ci95_low is None or row.objective_ci95_high is None:
        return None
    return Interval(row.objective, row.objective_ci95_low, row.objective_ci95_high)


def within_noise_of(top: PointRow, rows: Sequence[PointRow]) -> list[int]:
    """The other measured points whose objective interval overlaps `top`'s (none without intervals)."""
    interval = _interval(top)
    if interval is None:
        return []
    return sorted(r.point for r in rows if r.point != top.point and (i := _interval(r)) and not separated(interval, i))


def plan_sweep(
    spec: FineTuneSweepSpec,
    points: Sequence[SweepPoint],
    runs: Sequence[RunState],
    reuse: Mapping[int, ReuseCandidate] | None = None,
) -> SweepPlan:
    """The runs to start now (at most `parallelism` unfinished in all) and the table."""
    reuse = reuse or {}
    by_point: dict[int, list[RunState]] = {}
    for run in sorted(runs, key=lambda r: (r.point, r.repeat)):
        by_point.setdefault(run.point, []).append(run)
    phases: dict[int, tuple[PointPhase, str]] = {}
    for point in points:
        mine = by_point.get(point.index, [])
        if not point.valid:
            phases[point.index] = _refused_phase(mine, spec.repeats, point)
        elif mine:
            phases[point.index] = _point_phase(mine, spec.repeats)
        elif point.index in reuse:
            phases[point.index] = (PointPhase.REUSED, f"result of {reuse[point.index].name}")
        else:
            phases[point.index] = (PointPhase.PENDING, "")
    order = memory_order(points)
    if spec.oom_pruning:
        for point in order:
            if phases[point.index][0] != PointPhase.PENDING:
                continue
            cause = next(
                (q for q in order if phases[q.index][0] == PointPhase.GPU_OOM and needs_at_least(point, q)), None
            )
            if cause is not None:
                phases[point.index] = (
                    PointPhase.SKIPPED,
                    f"predicted OOM from point {cause.index} ({cause.describe()})",
                )
    slots = spec.parallelism - sum(1 for r in runs if not r.finished)
    to_create: list[NewRun] = []
    if spec.search is not None:
        spent = device_hours(points, phases, runs, reuse).spent
        to_create = _search_runs(spec, points, phases, by_point, reuse, slots, spent)
        slots = 0
    for point in order:
        if slots <= 0:
            break
        phase = phases[point.index][0]
        mine = by_point.get(point.index, [])
        if not point.valid or phase not in (PointPhase.PENDING, PointPhase.RUNNING) or len(mine) >= spec.repeats:
            continue
        if spec.oom_pruning and any(
            phases[q.index][0] not in FINISHED_POINT_PHASES and needs_at_least(point, q) for q in order
        ):
            continue  # a point below it may still run out of memory
        have = {r.repeat for r in mine}
        for repeat in range(spec.repeats):
            if repeat not in have and slots > 0:
                to_create.append(NewRun(point, repeat))
                slots -= 1
    rows = []
    for point in points:
        phase, message = phases[point.index]
        mine = by_point.get(point.index, [])
        if phase == PointPhase.REUSED:
            metrics, names = [reuse[point.index].metrics], [reuse[point.index].name]
        else:
            metrics = [r.metrics for r in mine if r.phase == Phase.SUCCEEDED and r.metrics is not None]
            names = [r.name for r in mine]
        rows.append(_row(point, phase, message, mine, metrics, spec.objective.metric, names))
    counts = _counts(rows)
    best = _best(rows, spec)
    sweep_phase = _sweep_phase(counts, runs)
    hours = device_hours(points, phases, runs, reuse)
    message = _message(counts, best, sweep_phase)
    return SweepPlan(tuple(to_create), tuple(rows), counts, best, sweep_phase, message, hours)


def _objective_of(metrics: Sequence[Metrics], metric: str) -> float | None:
    return _mean([float(v) for m in metrics if (v := m.model_dump(by_alias=True)[metric]) is not None])


def _search_runs(
    spec: FineTuneSweepSpec,
    points: Sequence[SweepPoint],
    phases: dict[int, tuple[PointPhase, str]],
    by_point: Mapping[int, list[RunState]],
    reuse: Mapping[int, ReuseCandidate],
    slots: int,
    spent_hours: float,
) -> list[NewRun]:
    """spec.search: the runs to start (the missing repeats of points chosen before, then the points the search
    chooses now, each with all its repeats), and, once the search has stopped with nothing running, every point it
    did not choose Skipped with its reason (`phases` is updated in place). Every decision comes from the runs
    observed: a resumed search repeats no trial."""
    assert spec.search is not None
    candidates = sweep_candidates(points, spec.objective.metric in SEARCH_PER_GPU)
    budget = sweep_budget(len(candidates), spec.search.fraction, spec.search.trials)
    trials, excluded, new = [], [], []
    for point in points:
        phase, mine = phases[point.index][0], by_point.get(point.index, [])
        if point.index in reuse and phase == PointPhase.REUSED:
            trials.append(Trial(str(point.index), _objective_of([reuse[point.index].metrics], spec.objective.metric)))
        elif mine and phase == PointPhase.SKIPPED:
            excluded.append(str(point.index))  # refused before launch (predicted OOM): not a trial of the budget
        elif mine:
            done = [r.metrics for r in mine if r.phase == Phase.SUCCEEDED and r.metrics is not None]
            value = _objective_of(done, spec.objective.metric) if phase == PointPhase.SUCCEEDED else None
            trials.append(Trial(str(point.index), value))
            have = {r.repeat for r in mine}
            if phase == PointPhase.RUNNING and point.valid:
                for repeat in (r for r in range(spec.repeats) if r not in have):
                    if slots > 0:
                        new.append(NewRun(point, repeat))
                        slots -= 1
        elif phase != PointPhase.PENDING:
            excluded.append(str(point.index))
    by_key = {str(p.index): p for p in points}
    limit = spec.search.gpu_hours
    hours_spent = limit is not None and spent_hours >= limit
    if hours_spent:
        budget = min(budget, len(trials))  # the device-hours are spent: the trials so far are the budget
    while slots > 0:
        step = next_step(candidates, trials, budget, excluded)
        if step.candidate is None:
            break
        chosen = by_key[step.candidate.key]
        for repeat in range(min(spec.repeats, slots)):
            new.append(NewRun(chosen, repeat))
        slots -= min(spec.repeats, slots)
        trials.append(Trial(step.candidate.key, None))
    step = next_step(candidates, trials, budget, excluded)
    in_flight = any(not r.finished for mine in by_point.values() for r in mine)
    if step.candidate is None and not in_flight and not new:
        for point in points:
            if phases[point.index][0] == PointPhase.PENDING and point.valid:
                stop = (
                    f"the budget of {limit:g} device-hours is spent ({spent_hours:.3g})" if hours_spent else step.reason
                )
                why = step.skipped.get(str(point.index), stop)
                phases[point.index] = (PointPhase.SKIPPED, f"search: not measured, {why}")
    return new


def device_hours(
    points: Sequence[SweepPoint],
    phases: Mapping[int, tuple[PointPhase, str]],
    runs: Sequence[RunState],
    reuse: Mapping[int, ReuseCandidate],
) -> DeviceHours:
    """What the sweep's runs spent on their devices and what it saved (issue 47): measured for reuse,
    estimated for early stops (ftbench.stats.device_time) and for skipped points (a run that would run
    out of memory costs about its set-up: the sweep's mean set-up per device x the point's devices)."""
    specs = {p.index: p.spec for p in points}

    def split(m: Metrics, point: int) -> DeviceTime:
        spec = specs.get(point)
        return device_time(m, spec.stop_after_seconds if spec else -1.0, (spec.repeats or 1) if spec else 1)

    done = [(r.metrics, r.point) for r in runs if r.finished and r.metrics is not None]
    spent = sum((split(m, point) for m, point in done), DeviceTime())
    per_device = [m.setup_seconds for m, _ in done]
    setup = statistics.fmean(per_device) if per_device else 0.0
    skips = sum(
        setup * max(1, spec.number_gpus)
        for p in points
        if phases[p.index][0] == PointPhase.SKIPPED and (spec := p.spec) is not None
    )
    reused = sum(
        (split(reuse[p.index].metrics, p.index) for p in points if phases[p.index][0] == PointPhase.REUSED),
        DeviceTime(),
    )
    early = spent.saved_estimate or 0.0
    hour = 3600.0
    return DeviceHours(
        spent=spent.total / hour,
        runs_without_result=sum(1 for r in runs if r.finished and r.metrics is None),
        saved_by_early_stops_estimate=early / hour,
        saved_by_reuse=reused.total / hour,
        saved_by_skips_estimate=skips / hour,
        with_fixed_stops_estimate=(spent.total + early + reused.total + skips) / hour,
    )


_COUNTED = {
    PointPhase.PENDING: "pending",
    PointPhase.RUNNING: "running",
    PointPhase.SUCCEEDED: "succeeded",
    PointPhase.GPU_OOM: "gpu_oom",
    PointPhase.FAILED: "failed",
    PointPhase.INVALID: "invalid",
    PointPhase.SKIPPED: "skipped",
    PointPhase.REUSED: "reused",
}


def _counts(rows: Sequence[PointRow]) -> PointCounts:
    values = {name: 0 for name in _COUNTED.values()}
    for row in rows:
        values[_COUNTED[row.phase]] += 1
    finished = sum(1 for row in rows if row.phase in FINISHED_POINT_PHASES)
    return PointCounts(total=len(rows), finished=finished, **values)


def _best(rows: Sequence[PointRow], spec: FineTuneSweepSpec) -> BestPoint | None:
    scored = [r for r in rows if r.phase in (PointPhase.SUCCEEDED, PointPhase.REUSED) and r.objective is not None]
    if not scored:
        return None
    sign = 1 if spec.objective.direction == Direction.MAX else -1
    top = max(scored, key=lambda r: (sign * (r.objective or 0.0), -r.point))
    assert top.objective is not None
    return BestPoint(
        point=top.point,
        values=top.values,
        metric=spec.objective.metric,
        value=top.objective,
        ci95_low=top.objective_ci95_low,
        ci95_high=top.objective_ci95_high,
        within_noise_of=within_noise_of(top, scored),
        train_tokens_per_second=top.train_tokens_per_second,
        experiments=top.experiments,
    )


def _sweep_phase(counts: PointCounts, runs: Sequence[RunState]) -> SweepPhase:
    if counts.finished == counts.total:
        return SweepPhase.FAILED if counts.failed else SweepPhase.SUCCEEDED
    return SweepPhase.RUNNING if runs or counts.finished else SweepPhase.PENDING


def _message(counts: PointCounts, best: BestPoint | None, phase: SweepPhase) -> str:
    parts = [f"{getattr(counts, name)} {name.replace('_', ' ')}" for name in _COUNTED.values() if getattr(counts, name)]
    text = f"{counts.finished}/{counts.total} points finished ({', '.join(parts)})"
    if best is not None:
        text += f"; best {best.metric} {best.value:.6g} at point {best.point}"
        if best.within_noise_of:
            text += f" (within noise of point{'s' * (len(best.within_noise_of) > 1)} "
            text += ", ".join(map(str, best.within_noise_of[:5])) + ", ..." * (len(best.within_noise_of) > 5) + ")"
    if phase == SweepPhase.FAILED:
        text += "; some points failed: see status.points"
    return text
