"""attentionImplementation is in effect: the real trainer loads the model with it, and the result
says which one ran, read from the loaded model (not from the spec), for trl and the newest
fms-hf-tuning release (whose eager goes through --flash_attn_implementation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import NEWEST_FMS, make_plan, read_result, run_trainer, tail, write_plan

from ftbench.contracts.results import EXIT_OK, Outcome

pytestmark = [pytest.mark.training, pytest.mark.slow]
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("engine", ["trl", "fms-hf-tuning"])
def test_the_attention_asked_for_is_the_one_in_effect(
    tmp_path: Path, tiny_model_dir: Path, engine: str, attention: str, request: pytest.FixtureRequest
) -> None:
    if engine == "fms-hf-tuning":  # the trainer builds the tiny model in that release's environment
        python, model_dir = request.getfixturevalue("fms_python"), tmp_path / "model"
        extra: dict[str, object] = {"engine": engine, "fmsHfTuningVersion": NEWEST_FMS}
    else:
        python, model_dir, extra = PYTHON, tiny_model_dir, {}
    plan = make_plan(tmp_path, model_dir, tmp_path / "data", maxSteps=2, attentionImplementation=attention, **extra)  # type: ignore[arg-type]
    assert plan.training.attn_implementation.value == attention
    proc = run_trainer(python, write_plan(plan, tmp_path))
    assert proc.returncode == EXIT_OK, tail(proc)
    result = read_result(plan)
    assert result.outcome == Outcome.SUCCEEDED and result.environment is not None
    assert result.environment.attention_implementation == attention
