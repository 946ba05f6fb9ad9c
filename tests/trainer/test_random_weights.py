"""Random weights of a catalog architecture (bench/gpu/run.py --random-weights): the folder the trainer
and the predictor load is that architecture, in the dtype asked, with a tokenizer whose ids fit it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftbench.catalog import load_catalog
from ftbench_trainer.random_weights import MARKER, build_random_weights

pytest.importorskip("transformers")

# llama-7b's catalog entry, shrunk in width and depth: the same keys as the entry the GPU run builds.
SMALL = load_catalog().models["llama-7b"].architecture or {}
SMALL = {**SMALL, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
SMALL |= {"num_attention_heads": 4, "num_key_value_heads": 4}


def test_the_folder_is_the_architecture_in_the_dtype_asked(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_random_weights(tmp_path / "m", SMALL, dtype="bfloat16", device="cpu")
    model = AutoModelForCausalLM.from_pretrained(path)
    config = model.config
    for key, value in SMALL.items():
        assert getattr(config, key) == value, key
    assert next(model.parameters()).dtype == torch.bfloat16
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = tokenizer("### Input:\nThe mayor opened a new road.")["input_ids"]
    assert max(ids) < config.vocab_size and config.pad_token_id == tokenizer.pad_token_id
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([ids])).logits.float()).all()
    marker = json.loads((path / MARKER).read_text())
    assert marker["params"]["architecture"] == SMALL and marker["parameters"] == model.num_parameters()


def test_a_built_folder_is_reused_and_other_parameters_rebuild(tmp_path: Path) -> None:
    path = build_random_weights(tmp_path / "m", SMALL, dtype="float32", device="cpu")
    weights = path / "model.safetensors"
    written = weights.stat().st_mtime_ns
    build_random_weights(path, SMALL, dtype="float32", device="cpu")
    assert weights.stat().st_mtime_ns == written
    build_random_weights(path, SMALL, dtype="bfloat16", device="cpu")
    assert json.loads((path / MARKER).read_text())["params"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("engine", ["trl", "fms-hf-tuning"])
def test_the_command_line_builds_it(tmp_path: Path, engine: str, request: pytest.FixtureRequest) -> None:
    """Under trl's transformers 5 and under the newest fms-hf-tuning environment's transformers 4 (a
    lent GPU runs the matrix with engine fms-hf-tuning: run.py builds the weights with its --python)."""
    from ftbench.engines.envs import package_path

    python = str(request.getfixturevalue("fms_python")) if engine == "fms-hf-tuning" else sys.executable
    env = {**os.environ, "PYTHONPATH": package_path()}
    done = subprocess.run(
        [python, "-m", "ftbench_trainer.random_weights", str(tmp_path / "m"), "--architecture",
         json.dumps(SMALL), "--dtype", "bfloat16"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["hidden_size"] == 64 and "bfloat16" in (config.get("dtype"), config.get("torch_dtype"))


def test_the_tokenizer_fills_the_vocabulary_and_loads_under_transformers_4(tmp_path: Path, fms_python: Path) -> None:
    """A tokenizer shorter than the architecture's vocabulary makes fms-hf-tuning shrink the embeddings
    to it (tokenizer_and_embedding_resize); one saved as transformers 5 names it does not load in 4.x."""
    from transformers import AutoTokenizer

    path = build_random_weights(tmp_path / "m", SMALL, dtype="float32", device="cpu")
    assert len(AutoTokenizer.from_pretrained(path)) == SMALL["vocab_size"]
    probe = "import sys; from transformers import AutoTokenizer; print(len(AutoTokenizer.from_pretrained(sys.argv[1])))"
    done = subprocess.run([str(fms_python), "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == str(SMALL["vocab_size"]), done.stderr[-2000:]


@pytest.mark.training
@pytest.mark.fms
@pytest.mark.slow
def test_fms_hf_tuning_trains_the_architecture_as_built(tmp_path: Path, fms_python: Path) -> None:
    """The lent H100's first fms-hf-tuning runs (2026-11-26) trained llama-7b with its vocabulary cut to
    the 512 tokens of an unfilled tokenizer: less memory than predicted (+14 % "error" for LoRA). On the
    folder as built now, the real step's peak is the predicted one (rows truncated to modelMaxLength, so
    no padding mask: see test_fms_engine for that limit). At modelMaxLength 320 every row is longer and
    every prompt shorter (218-305 tokens under this tokenizer): each row is cut, and each keeps a trained
    token (at 64 no row did, and the run is now refused before its first step: TooFewTrainedRows)."""
    from helpers import NEWEST_FMS, make_plan, train

    from ftbench.contracts.enums import Experiment
    from ftbench.contracts.results import Outcome

    model_dir = build_random_weights(tmp_path / "m", SMALL, dtype="float32", device="cpu")
    plan = make_plan(tmp_path, model_dir, tmp_path / "data", engine="fms-hf-tuning", experiment=Experiment.LORA,
                     fmsHfTuningVersion=NEWEST_FMS, modelMaxLength=320, maxSteps=2, targetModules=["q_proj", "v_proj"])  # fmt: skip
    # The folder is the model: the plan's tiny-model entry must not build the tiny model over it.
    plan = plan.model_copy(update={"model": plan.model.model_copy(update={"generated": False})})
    result, _ = train(fms_python, plan, tmp_path)
    assert result.outcome == Outcome.SUCCEEDED, result.error
    m = result.metrics
    assert m is not None and m.cpu_tensor_peak_bytes > 0 and m.prediction_error_percent is not None
    assert abs(m.prediction_error_percent) <= 5.0, (m.cpu_tensor_peak_bytes, m.predicted_peak_bytes)
