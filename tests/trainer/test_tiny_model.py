"""The locally built tiny model and tokenizer, in this env and in the fms-hf-tuning env."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from ftbench.engines.envs import package_path
from ftbench_trainer.tiny_model import MARKER, RESPONSE_TEMPLATE, SPECIAL_TOKENS, build_tiny_model

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROW = "### Input:\nThe mayor opened a new road.\n\n### Response:The zoo was closed on Monday."


def test_loads_and_runs_forward(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "llama"
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (64, 2)
    assert model.config.num_attention_heads == 4 and model.config.intermediate_size == 128
    assert sum(p.numel() for p in model.parameters()) < 300_000
    assert model.config.vocab_size == len(tok) <= 1024
    batch = tok([ROW, "short"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**batch, labels=batch["input_ids"])
    assert out.logits.shape[:2] == batch["input_ids"].shape
    assert torch.isfinite(out.loss)


def test_special_tokens(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert [tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token] == SPECIAL_TOKENS
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    ids = tok(ROW)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True).strip() == ROW.strip()


def test_response_template_is_llama_like(tiny_model_dir: Path) -> None:
    """fms drops the first two template ids; the rest must occur in every tokenized row."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    template = tok.encode(RESPONSE_TEMPLATE, add_special_tokens=False)
    assert tok.convert_ids_to_tokens(template[:2]) == ["Ġ", "Ċ"]
    rest = template[2:]
    assert tok.convert_ids_to_tokens(rest) == ["###", "ĠResponse", ":"]
    ids = tok(ROW)["input_ids"]
    starts = [i for i in range(len(ids)) if ids[i : i + len(rest)] == rest]
    assert len(starts) == 1
    # the response follows right after the template
    assert tok.decode(ids[starts[0] + len(rest) :]).startswith("The zoo")


def test_idempotent_and_deterministic(tiny_model_dir: Path, tmp_path: Path) -> None:
    marker = (tiny_model_dir / MARKER).read_text()
    mtime = (tiny_model_dir / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(tiny_model_dir) == tiny_model_dir
    assert (tiny_model_dir / "model.safetensors").stat().st_mtime_ns == mtime
    assert (tiny_model_dir / MARKER).read_text() == marker
    # same seed -> same weights and vocabulary
    other = build_tiny_model(tmp_path / "again")
    assert (other / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    vocab = json.loads((other / "tokenizer.json").read_text())["model"]["vocab"]
    assert vocab == json.loads((tiny_model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_other_parameters_rebuild(tmp_path: Path) -> None:
    path = build_tiny_model(tmp_path / "m", model_max_length=256)
    assert json.loads((path / "config.json").read_text())["max_position_embeddings"] == 256
    path = build_tiny_model(tmp_path / "m", model_max_length=512)
    assert json.loads((path / "config.json").read_text())["max_position_embeddings"] == 512
    assert json.loads((path / MARKER).read_text())["params"]["model_max_length"] == 512


FMS_CHECK = textwrap.dedent(
    """
    import sys
    import torch, transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tok.encode("\\n### Response:", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids[2:]) == ["###", "\\u0120Response", ":"], ids
    batch = tok(["### Input:\\nx\\n\\n### Response:y"], return_tensors="pt")
    loss = model(**batch, labels=batch["input_ids"]).loss
    assert torch.isfinite(loss)
    import tuning.sft_trainer  # fms-hf-tuning imports in this env
    print("OK", transformers.__version__)
    """
)


@pytest.mark.fms
@pytest.mark.slow
def test_builds_and_loads_in_fms_env(fms_python: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": package_path()}
    out = tmp_path / "tiny-fms"
    build = subprocess.run(
        [str(fms_python), "-m", "ftbench_trainer.tiny_model", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    assert build.stdout.strip().splitlines()[-1] == str(out)
    assert json.loads((out / MARKER).read_text())["transformers"].startswith("4.")
    check = subprocess.run(
        [str(fms_python), "-c", FMS_CHECK, str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().startswith("OK 4.")
