from ftbench.contracts.outcomes import OUTCOMES, Phase, status_reason
from ftbench.contracts.results import EXIT_GPU_OOM, REASON_ENGINE_MISMATCH, Outcome


def test_every_outcome_has_one_rule() -> None:
    assert set(OUTCOMES) == set(Outcome)
    assert [OUTCOMES[o].phase for o in Outcome] == [Phase.SUCCEEDED, Phase.INVALID, Phase.FAILED, Phase.INVALID]
    assert [OUTCOMES[o].is_valid for o in Outcome] == [True, False, None, False]  # seed 001's is_valid
    assert OUTCOMES[Outcome.GPU_OOM].exit_code == EXIT_GPU_OOM


def test_only_a_failed_result_names_its_own_reason() -> None:
    assert status_reason(Outcome.FAILED, REASON_ENGINE_MISMATCH) == REASON_ENGINE_MISMATCH
    assert status_reason(Outcome.FAILED) == "TrainingError"
    assert status_reason(Outcome.SUCCEEDED, "Succeeded") == "ResultsRecorded"
    assert status_reason(Outcome.GPU_OOM, "Whatever") == "GpuOutOfMemory"
