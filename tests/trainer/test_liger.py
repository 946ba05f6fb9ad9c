"""Liger kernels: refused on CPU (they are Triton GPU kernels), and really applied by the engine
where that can be checked without a GPU: the SFTTrainer ftbench builds for a plan with
`ligerKernel` patches the model before training starts (the forwards of the model, its norms and
MLPs become liger_kernel's), which is what status.environment.ligerKernel reads. Training itself
would run the Triton kernels, so the check stops at the start of training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import OFFLINE_ENV, make_plan, write_plan

from ftbench.api.validation import validate_spec_dict
from ftbench.engines.envs import package_path

pytestmark = [pytest.mark.training]


# In a fresh process: liger-kernel also patches transformers' classes, which would leave the
# Triton forwards in place for the other tests of this process.
PROBE = r"""
import json, sys
from transformers import TrainerCallback
from ftbench.contracts.plan import LaunchPlan
from ftbench_trainer.engines.run import EngineRun
from ftbench_trainer.engines.trl import build_trainer
from ftbench_trainer.measure.callback import MeasureCallback, liger_in_effect
from ftbench_trainer.inputs import resolve_dataset

class Started(Exception):
    pass

class Probe(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        print(json.dumps({"liger": liger_in_effect(kwargs["model"])}))
        raise Started

plan = LaunchPlan.read(sys.argv[1])
dataset, _ = resolve_dataset(plan)
run = EngineRun(plan, plan.model.ref, dataset, MeasureCallback(plan, dataset_tokens_per_sample=0.0))
try:
    build_trainer(run, [Probe()]).train()
except Started:
    pass
"""


@pytest.mark.parametrize("liger", [True, False])
def test_the_engine_patches_the_model_with_liger(tmp_path: Path, tiny_model_dir: Path, liger: bool) -> None:
    """The check stops at on_train_begin, after the Trainer applied Liger and before any kernel ran."""
    pytest.importorskip("liger_kernel", reason="liger-kernel (dev extra) not installed")
    # Validation refuses ligerKernel on CPU; the plan is the GPU plan's training settings on the tiny model.
    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data")
    plan = plan.model_copy(update={"training": plan.training.model_copy(update={"use_liger_kernel": liger})})
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": package_path()}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(write_plan(plan, tmp_path))], env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"liger": liger}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"numberGpus": 0, "engine": "trl"}, "need a GPU"),
        ({"numberGpus": 8, "gpuModel": "G", "device": "cpu", "engine": "trl"}, "need a GPU"),
        ({"numberGpus": 8, "gpuModel": "G"}, "not offered with engine fms-hf-tuning"),
    ],
)
def test_liger_is_refused_where_it_cannot_run(spec: dict, why: str) -> None:
    base = {"model": "llama3.1-8b", "modelMaxLength": 2048, "batchSize": 8, "ligerKernel": True}
    issues = [i for i in validate_spec_dict({**base, **spec}).issues if i.rule == "liger.gpu-trl"]
    assert issues and why in str(issues[0])
    assert validate_spec_dict({**base, "numberGpus": 8, "gpuModel": "G", "engine": "trl"}).ok


def test_the_tested_liger_is_the_one_the_trl_image_installs() -> None:
    from importlib.metadata import version

    pytest.importorskip("liger_kernel", reason="liger-kernel (dev extra) not installed")
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile.trainer").read_text()
    assert f"ARG LIGER_KERNEL_VERSION={version('liger-kernel')}\n" in dockerfile
