"""Every optimizer the API accepts for a stack takes a step there; every other one is refused with the reason.

ftbench/engines/data/optimizers.yaml says, per engine stack, which of seed 001's optimizer names run
(`engine.optimizer` refuses the rest). Here each name a stack runs is built the way its transformers'
Trainer builds it (`Trainer.get_optimizer_cls_and_kwargs`) and takes one step on CPU: in this
environment for trl, and in the oldest and the newest release's environments for fms-hf-tuning (their
transformers differ most). The table is fresh when each stack's transformers is the one it was read from.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import fms_env_python

pytest.importorskip("torch")

from ftbench.api.validation import validate_spec_dict
from ftbench.engines.locks import lock_path
from ftbench.engines.optimizers import PACKAGES, PROBE, load_optimizers
from ftbench.engines.releases import TRL_STACK, load_releases, parse_lock, version_tuple

# One step of each named optimizer, as the stack's Trainer builds it; prints the names that stepped.
STEP = """
import json, sys, tempfile, torch
from transformers import Trainer, TrainingArguments
done = []
for name in json.loads(sys.argv[1]):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), optim=name, use_cpu=True, report_to=[])
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    optimizer = cls(model.parameters(), **kwargs)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    done.append(name)
print(json.dumps(done))
"""


def run_steps(python: str, names: list[str], pythonpath: str | None = None) -> list[str]:
    env = {"PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1", **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    done = subprocess.run([python, "-c", STEP, json.dumps(names)], capture_output=True, text=True, env=env,
                          timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_table_is_read_from_the_stacks_that_run():
    """trl's entry is this environment's (probed again here); each release's names the transformers its lock has."""
    import sys

    probed = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                       check=True).stdout.strip().splitlines()[-1])  # fmt: skip
    table = load_optimizers()
    assert table[TRL_STACK]["transformers"] == probed["transformers"], "python -m ftbench.engines.optimizers --write"
    assert sorted(table[TRL_STACK]["runs"] + list(table[TRL_STACK]["needsPackage"])) == sorted(probed["names"])
    for release in load_releases().installable:
        locked = parse_lock(lock_path(release).read_text())["transformers"]
        assert table[release.version]["transformers"] == locked, (release.version, "regenerate the table")
    offered = {name for table in table.values() for name in (*table["runs"], *table["needsPackage"])}
    assert set(PACKAGES) <= offered, "a package for a name no stack's transformers has"


def test_what_a_stack_cannot_run_is_refused_with_the_reason():
    base = {"experiment": "finetune_lora_benchmark-v1.0.0", "model": "ftbench-tiny-llama", "modelMaxLength": 512,
            "numberGpus": 1, "batchSize": 1, "gpuModel": "NVIDIA-A100-SXM4-80GB"}  # fmt: skip
    cases = {
        ("trl", "adamw_hf"): "is not an optimizer of transformers",  # removed from transformers 5
        ("trl", "adamw_apex_fused"): "is not an optimizer of transformers",
        ("trl", "galore_adamw"): "needs the Python package galore_torch",
        ("trl", "adamw_bnb_8bit"): "needs the Python package bitsandbytes",
        ("3.1.0", "adamw_hf"): "is not an optimizer of transformers 4.55",
        ("2.4.0", "schedule_free_adamw"): "needs the Python package schedulefree",
    }
    for (stack, optim), words in cases.items():
        engine = {"engine": "trl"} if stack == TRL_STACK else {"engine": "fms-hf-tuning", "fmsHfTuningVersion": stack}
        report = validate_spec_dict({**base, **engine, "optim": optim})
        assert [i.rule for i in report.issues] == ["engine.optimizer"] and words in report.issues[0].message, (
            stack, optim, report.summary())  # fmt: skip
    assert validate_spec_dict({**base, "engine": "fms-hf-tuning", "fmsHfTuningVersion": "2.4.0",
                               "optim": "adamw_hf"}).ok  # transformers 4.45 still has it  # fmt: skip


def test_every_optimizer_trl_runs_takes_a_step():
    import sys

    runs = load_optimizers()[TRL_STACK]["runs"]
    assert run_steps(sys.executable, runs) == runs


@pytest.mark.fms
@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_every_optimizer_a_release_runs_takes_a_step(which: str):
    from ftbench.engines.envs import package_path

    releases = sorted((r.version for r in load_releases().installable), key=version_tuple)
    release = releases[0] if which == "oldest" else releases[-1]
    runs = load_optimizers()[release]["runs"]
    python = str(fms_env_python(release))
    assert run_steps(python, runs, package_path()) == runs, release
    assert Path(python).exists()
