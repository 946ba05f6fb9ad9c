"""The prompt lengths validation reads (ftbench/catalog/data/prompt_tokens.yaml) are fresh, and what they
say a spec trains on is what a real run counts with the engine's own collator."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_plan, train

from ftbench.api.rules.data import rows_that_train
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import load_catalog
from ftbench.catalog.loader import PROMPT_TOKENS_FILE

PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


def test_the_prompt_table_is_fresh() -> None:
    from ftbench_trainer.measure.prompt_table import render, table

    assert PROMPT_TOKENS_FILE.read_text() == render(table()), "run hack/generate.sh"


@pytest.mark.training
@pytest.mark.slow
def test_validation_counts_the_rows_a_run_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The whole 4096-entry dataset at modelMaxLength 256 (where two thirds of the prompts fill the length):
    the count validation states before the run equals the run's rowsTrained."""
    spec = {"modelMaxLength": 256, "maxSteps": 1, "datasetId": "news-chars-512-entries-4096"}
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", entries=4096, **spec)  # type: ignore[arg-type]
    result, _ = train(PYTHON, plan, tmp_path)
    m = result.metrics
    assert m is not None
    fields = {"model": "ftbench-tiny-llama", "numberGpus": 0, "batchSize": 4, **spec}
    stated = rows_that_train(FineTuneExperimentSpec.model_validate(fields), load_catalog())
    assert stated is not None and (stated.offered, stated.trained) == (m.rows_offered, m.rows_trained) == (4096, 1366)
