"""Fixtures for the trainer tests: offline Hugging Face, one thread, a locally built tiny model.

The ML stack is optional: tests that need it call ``pytest.importorskip`` so the suite still
collects and skips cleanly in an environment with only the base dependencies.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import NEWEST_FMS, fms_env_python

# Nothing may be downloaded at test time, and small CPU runs are far less noisy on one thread.
for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_name] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama + byte-level BPE tokenizer built with this env's transformers."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ftbench_trainer.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture(scope="session")
def fms_python() -> Path:
    """The newest offered release's environment (the single-release trainer tests run there)."""
    return fms_env_python(NEWEST_FMS)
