"""Fixtures for the trainer tests: offline Hugging Face, one thread, a locally built tiny model.

The ML stack is optional: tests that need it call ``pytest.importorskip`` so the suite still
collects and skips cleanly in an environment with only the base dependencies.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    """The interpreter of the fms-hf-tuning environment (``.venv-fms``, see hack/setup-envs.sh).

    Override with ``FTBENCH_FMS_PYTHON``; with ``FTBENCH_REQUIRE_FMS=1`` (CI) a missing
    environment fails instead of skipping.
    """
    python = Path(os.environ.get("FTBENCH_FMS_PYTHON", REPO_ROOT / ".venv-fms" / "bin" / "python"))
    if not python.exists():
        reason = f"fms-hf-tuning environment not found at {python} (create it with hack/setup-envs.sh fms)"
        if os.environ.get("FTBENCH_REQUIRE_FMS") == "1":
            pytest.fail(f"FTBENCH_REQUIRE_FMS=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return python
