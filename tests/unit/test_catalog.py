"""The catalogs hold every model and dataset of the seeds, and model maps override them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from ftbench.catalog import load_catalog
from ftbench.catalog.loader import ExperimentFixed, load_model_map
from ftbench.contracts.enums import Experiment

CATALOG = load_catalog()
SHARED = Path(os.environ.get("FTBENCH_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))
SEED_001 = SHARED / "seeds" / "001_aa953b95cfcda5e9.txt"


def _seed_model_lists() -> list[list[str]]:
    text = SEED_001.read_text()
    return [json.loads(m) for m in re.findall(r"model_name: Supported models:\s*\n.*\n\s*`(\[[^`]+\])`", text)]


@pytest.mark.skipif(not SEED_001.exists(), reason=f"seed documents not found at {SEED_001}")
def test_every_seed_model_is_in_the_catalog() -> None:
    lists = _seed_model_lists()
    assert len(lists) == 5
    for names in lists:
        missing = set(names) - set(CATALOG.models)
        assert not missing


@pytest.mark.skipif(not SEED_001.exists(), reason=f"seed documents not found at {SEED_001}")
def test_lora_targets_match_the_seed_table() -> None:
    table = re.findall(r"^- `([^`]+)`:\s*\n?\s*`(\[[^`]+\])`", SEED_001.read_text(), flags=re.M)
    assert len(table) >= 30
    for name, targets in table:
        assert CATALOG.models[name].target_modules == tuple(json.loads(targets)), name


def test_gptq_experiment_models_have_gptq_weights() -> None:
    for name in (
        "llama-7b",
        "granite-20b-v2",
        "granite-7b-base",
        "granite-8b-code-instruct",
        "granite-34b-code-base",
        "mistral-7b-v0.1",
        "llama3-70b",
        "mixtral-8x7b-instruct-v0.1",
        "llama3.1-405b",
    ):
        assert CATALOG.models[name].weights.gptq, name


def test_every_seed_dataset_is_in_the_catalog() -> None:
    assert set(CATALOG.datasets) == {
        "news-chars-512-entries-4096",
        "news-chars-1024-entries-4096",
        "news-chars-2048-entries-4096",
        "news-tokens-16384plus-entries-4096",
        "news-tokens-128kplus-entries-320",
        "vision-384x384-16384plus-entries-4096",
        "vision-384x768-16384plus-entries-4096",
    }
    assert CATALOG.datasets["news-tokens-128kplus-entries-320"].min_tokens == 128 * 1024


def test_moe_models_know_their_experts() -> None:
    assert CATALOG.models["mixtral-8x7b-instruct-v0.1"].num_local_experts == 8


def test_model_map_overrides_and_extends(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("model_map:\n  granite-3.1-2b:\n    Vanilla: my/granite\n  new-model:\n    GPTQ-Quantized: /w\n")
    catalog = CATALOG.with_model_map(load_model_map(path))
    assert catalog.models["granite-3.1-2b"].weights.vanilla == "my/granite"
    assert catalog.models["granite-3.1-2b"].target_modules == ("q_proj", "v_proj")
    assert catalog.models["new-model"].weights.gptq == "/w"
    with pytest.raises(ValueError, match="unknown weights type"):
        CATALOG.with_model_map({"x": {"Quantised": "a/b"}})


def test_an_experiments_fixed_arguments_are_typed_when_the_catalog_loads() -> None:
    """GPTQ-LoRA's fixed fms-hf-tuning arguments reach the plan as booleans and strings, parsed once; a
    misspelt flag in a catalog (one a user extends) is refused where it used to be silently ignored."""
    fixed = CATALOG.experiments[Experiment.GPTQ_LORA].fixed
    assert fixed.fp16 is True and fixed.fast_kernels == (True, True, True)
    assert fixed.fused_lora == ("auto_gptq", "true") and fixed.auto_gptq == ("triton_v2",)
    assert ExperimentFixed.model_validate({"fast_kernels": ["true", "true", "false"]}).fast_kernels == (
        True,
        True,
        False,
    )
    with pytest.raises(ValidationError, match="fast_kernel"):
        ExperimentFixed.model_validate({"fast_kernel": [True, True, True]})
