"""bench/predict_latency.py on two catalog models (dense, MoE) under fms-hf-tuning 3.1.0, as issue 63 asks of CI.

It fails only on a wrong answer (a call that fails, or a kept trace's answer that differs from the cold one),
never on a time; the table of times it prints is not asserted on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fms, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "predict_latency.py"


def test_kept_traces_answer_as_the_cold_calls() -> None:
    from tests.trainer.helpers import fms_env_python

    fms_env_python("3.1.0")
    cmd = [sys.executable, str(BENCH), "--models", "llama3.2-1b,granite-3.0-1b-a400m-base", "--engines",
           "fms-hf-tuning 3.1.0", "--runs", "1", "--no-sweep", "--no-min-gpus"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "| granite-3.0-1b-a400m-base | fms-hf-tuning 3.1.0 |" in proc.stdout
