from ftbench.api.stability import aggregate_trials, stability_is_valid, trial_outcome
from ftbench.contracts.results import Outcome, RunError, TrainerResult


def result(outcome: Outcome) -> TrainerResult:
    error = None if outcome == Outcome.SUCCEEDED else RunError(type="X", message="boom")
    return TrainerResult(outcome=outcome, error=error)


def test_fractions_over_finished_trials() -> None:
    outcomes = [Outcome.SUCCEEDED, Outcome.GPU_OOM, Outcome.SUCCEEDED, Outcome.FAILED, Outcome.GPU_OOM]
    stability = aggregate_trials([trial_outcome(i, result(o)) for i, o in enumerate(outcomes)], planned=5)
    assert (stability.f_no_error, stability.f_gpu_oom, stability.f_other_error) == (0.4, 0.4, 0.2)
    assert stability.trials_finished == 5 and stability_is_valid(stability)
    assert stability.trials[3].message == "boom"


def test_partial_and_duplicate_reports() -> None:
    trials = [trial_outcome(0, result(Outcome.FAILED)), trial_outcome(0, result(Outcome.SUCCEEDED))]
    stability = aggregate_trials(trials, planned=5)
    assert stability.trials_finished == 1 and stability.f_no_error == 1.0
    assert not stability_is_valid(stability)
    assert aggregate_trials([], planned=5).f_no_error == 0.0
