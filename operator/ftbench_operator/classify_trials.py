"""Several runs in sequence, one pod each: the stability experiment's trials and an experiment's
repeats, aggregated as they finish (pure, as `classify`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ftbench.api import stability
from ftbench.api.repeats import combined_result, precise_repeats
from ftbench.api.status import Phase, TrialOutcome
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench_operator.classify import Observation, latest_per, pod_failure, run_progress, waiting_failure
from ftbench_operator.reasons import CHILD_DELETED, REPEATS_COMPLETED, RUNNING, TRIALS_COMPLETED, WORKLOAD_FAILED
from ftbench_operator.summaries import PodSummary, WorkloadSummary, parse_result, trial_of


def trial_result(pod: PodSummary) -> TrainerResult | None:
    """The trainer's result a finished trial pod left (None while it runs, or when it left none)."""
    return parse_result(pod.container.message) if pod.container.state == "terminated" else None


def trial_outcome(pod: PodSummary, index: int, result: TrainerResult | None) -> TrialOutcome | None:
    """A finished trial's outcome (None while the trial pod runs): the trainer's `result` if it left
    one (`trial_result`), else what Kubernetes says of the pod."""
    if result is not None:
        return stability.trial_outcome(index, result)
    verdict = pod_failure(pod)
    if verdict is None:
        return None
    outcome = Outcome.GPU_OOM if verdict.phase == Phase.INVALID else Outcome.FAILED
    return stability.trial(index, outcome, verdict.reason, verdict.message)


def repeats_verdict(
    done: tuple[TrialOutcome, ...], results: tuple[TrainerResult, ...], start: str | None, planned: int = 0
) -> Observation:
    """Every repeat ended (or, with fewer than `planned`, those that ran reached the precision target): the first that ran out of GPU memory makes the experiment Invalid (the
    configuration does not fit), else the first that failed makes it Failed, else it succeeded with
    the mean over the repeats (api.repeats)."""
    for outcome in (Outcome.GPU_OOM, Outcome.FAILED):
        if bad := next((t for t in done if t.outcome == outcome), None):
            phase = OUTCOMES[outcome].phase
            message = f"repeat {bad.index} of {len(done)}: {bad.message}".rstrip(": ")
            return Observation(phase, bad.reason, message, start_time=start, trials=done, trial_results=results)
    return Observation(
        Phase.SUCCEEDED,
        REPEATS_COMPLETED,
        f"{len(done)} repeats finished"
        + (f" of {planned}: the interval across them reached targetPrecisionPercent" if len(done) < planned else ""),
        result=combined_result(results) if results else None,
        start_time=start,
        trials=done,
        trial_results=results,
    )


def classify_trials(
    workloads: Iterable[WorkloadSummary],
    pods: Iterable[PodSummary],
    *,
    trials: int,
    workload_missing: bool,
    one_job_per_trial: bool,
    now: datetime,
    image_pull_grace_seconds: float = 300.0,
    repeated: bool = False,
    precision: float | None = None,
) -> Observation:
    """`trials` sequential single-node runs, aggregated as they finish: the stability experiment's
    trials, or with `repeated` an experiment's repeats.

    A trial that fails is a measurement, not the end of the experiment; repeats end as their worst
    outcome (`repeats_verdict`). With one Job per trial (clusters without Indexed Jobs) `next_trial`
    tells the caller which Job to create next, unless the repeats so far reached `precision` (the
    interval across them, api.repeats.precise_repeats; such repeats run one Job each).
    """
    if workload_missing:
        return Observation(Phase.FAILED, CHILD_DELETED, "a trial workload was deleted by hand; retry to run again")
    live = [p for p in pods if trial_of(p) is not None and (not p.deleting or p.container.state == "terminated")]
    by_trial = latest_per(live, trial_of)
    parsed = {i: trial_result(pod) for i, pod in sorted(by_trial.items()) if i < trials}  # each message once
    done = tuple(outcome for i, r in parsed.items() if (outcome := trial_outcome(by_trial[i], i, r)) is not None)
    start = min((p.start_time for p in by_trial.values() if p.start_time), default=None)
    results = tuple(r for r in parsed.values() if r is not None)
    if repeated and len(done) < trials and len(results) == len(done) and precise_repeats(results, precision):
        return repeats_verdict(done, results, start, trials)
    if len(done) >= trials:
        if repeated:
            return repeats_verdict(done, results, start)
        return Observation(
            Phase.SUCCEEDED,
            TRIALS_COMPLETED,
            f"{trials} trials finished",
            start_time=start,
            trials=done,
            trial_results=results,
        )
    workloads = list(workloads)
    if one_job_per_trial:
        created = {w.trial_label for w in workloads}
        finished = {t.index for t in done}
        if created <= finished and (nxt := len(created)) < trials:
            return Observation(
                Phase.RUNNING,
                RUNNING,
                f"{len(done)} of {trials} trials finished",
                start_time=start,
                trials=done,
                next_trial=nxt,
                trial_results=results,
            )
    elif any(w.failed for w in workloads) and not any(
        p.container.state in ("", "waiting", "running") for p in by_trial.values()
    ):
        w = next(w for w in workloads if w.failed)
        return Observation(
            Phase.FAILED,
            w.reason or WORKLOAD_FAILED,
            f"{w.kind} {w.name} stopped after {len(done)} of {trials} trials: {w.message}".rstrip(": "),
            start_time=start,
            trials=done,
        )
    waiting = waiting_failure(by_trial.values(), now, image_pull_grace_seconds)
    if waiting is not None:
        return Observation(waiting.phase, waiting.reason, waiting.message, start_time=start, trials=done)
    progress = run_progress(by_trial.values(), workloads)
    if done and progress.phase == Phase.PENDING:
        progress = Observation(Phase.RUNNING, RUNNING, "between trials")
    return Observation(
        progress.phase,
        progress.reason,
        f"{len(done)} of {trials} trials finished",
        start_time=start or progress.start_time,
        trials=done,
        trial_results=results,
    )
