"""The release table of what the engine's stack does (predict.stack) against the probes that read its source.

The table answers without importing trl or accelerate (a cold `ftbench predict` saved 2.8 s of trl's import);
these tests hold it to the source of the stacks ftbench runs (this environment's, trl's engine, and the newest
fms-hf-tuning release's), and show that a release outside the table, or a probe that fails, is a note.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import NEWEST_FMS, fms_env_python

from ftbench.engines.envs import package_path
from ftbench.local.runner import TrainerPython
from ftbench_trainer.predict import stack as stack_module
from ftbench_trainer.predict.stack import ACCELERATE, TRL, installed, stack

COMPARE = """
import json
from ftbench_trainer.predict import stack as s
print(json.dumps({
    "table": [s.TRL.get(s.installed("trl")), s.ACCELERATE.get(s.installed("accelerate"))],
    "probe": [[s.probe_fused_lm_head(), s.probe_logits_accuracy()], s.probe_fsdp2_no_sync()],
}))
"""


def test_table_agrees_with_the_probes_here() -> None:
    assert TRL[installed("trl") or ""] == (stack_module.probe_fused_lm_head(), stack_module.probe_logits_accuracy())
    assert ACCELERATE[installed("accelerate") or ""] == stack_module.probe_fsdp2_no_sync()
    assert stack().notes == ()


@pytest.mark.fms
def test_table_agrees_with_the_probes_of_the_newest_release() -> None:
    python = TrainerPython(str(fms_env_python(NEWEST_FMS)), package_path())
    proc = subprocess.run([python.path, "-c", COMPARE], env=python.environment(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = json.loads(proc.stdout.splitlines()[-1])
    assert answers["table"] == answers["probe"]


def test_a_release_outside_the_table_is_probed_and_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = stack()
    monkeypatch.setattr(stack_module, "TRL", {})
    monkeypatch.setattr(stack_module, "ACCELERATE", {})
    stack.cache_clear()
    try:
        probed = stack()
    finally:
        stack.cache_clear()
    assert (probed.fused_lm_head, probed.logits_accuracy, probed.fsdp2_no_sync) == (
        expected.fused_lm_head,
        expected.logits_accuracy,
        expected.fsdp2_no_sync,
    )
    assert any("trl" in n and "not in ftbench's release table" in n for n in probed.notes)
    assert any("accelerate" in n and "not in ftbench's release table" in n for n in probed.notes)


def test_a_probe_that_fails_is_a_guess_said_out_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise OSError("source not available")

    monkeypatch.setattr(stack_module, "ACCELERATE", {})
    monkeypatch.setattr(stack_module, "probe_fsdp2_no_sync", broken)
    stack.cache_clear()
    try:
        guessed = stack()
    finally:
        stack.cache_clear()
    assert not guessed.fsdp2_no_sync
    assert any(n.startswith("estimate: could not tell whether accelerate") and "OSError" in n for n in guessed.notes)
