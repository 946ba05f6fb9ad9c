"""distributedBackend DeepSpeed on two CPU ranks (DS_ACCELERATOR=cpu, gloo): every stage and offload value
the API offers: ZeRO-2, ZeRO-2 with the optimizer offloaded, and ZeRO-3 with the optimizer and the parameters
offloaded. Each run trains one epoch through `ftbench-trainer` (trl), the
engine's stage and offload are read back into status.environment.deepspeed, and the counts are exact:
the two ranks together see the whole dataset, and the model's size is the whole model's under ZeRO-3's
partitioned parameters too."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    dataset_file,
    independent_lengths,
    read_result,
    run_trainer,
    tail,
    two_processes_one_node,
    write_plan,
)

from ftbench.contracts.environment import DeepSpeedInEffect
from ftbench.contracts.results import EXIT_OK, Outcome

pytestmark = [pytest.mark.training, pytest.mark.slow]
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
# DeepSpeed compiles its CPU ops (Adam for the offloads, the shared-memory collectives) on first use,
# minutes on CI's two cores: once here, before any run's clock starts. In CI the first offload run
# compiled inside its 600 s budget, was killed holding torch's build lock, and the next one waited on it.
# torch marks a build in progress with a `lock` file that a killed build leaves behind, and every later build
# then waits for it forever; the ops are built under the fixture's own lock (released when its holder dies),
# so a `lock` file found there is such a leftover.
BUILD_OPS = """
import os, pathlib
from torch.utils.cpp_extension import get_default_build_root
root = pathlib.Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
for stale in [*root.glob("*/cpu_adam/lock"), *root.glob("*/deepspeed_shm_comm/lock")]:
    stale.unlink()
from deepspeed.accelerator import get_accelerator
for name in ("CPUAdamBuilder", "ShareMemCommBuilder"):
    get_accelerator().create_op_builder(name).load()
"""


@pytest.fixture(scope="module")
def deepspeed_ops() -> None:
    """The CPU ops built (or found built) under a lock the xdist workers share."""
    pytest.importorskip("deepspeed")
    import fcntl
    import os
    import subprocess
    import tempfile

    with open(Path(tempfile.gettempdir()) / "ftbench-deepspeed-ops.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = {**os.environ, "DS_ACCELERATOR": "cpu"}
        done = subprocess.run([str(PYTHON), "-c", BUILD_OPS], env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    ("stage", "offload", "expected"),
    [
        (2, "none", DeepSpeedInEffect(zero_stage=2)),
        (2, "optimizer", DeepSpeedInEffect(zero_stage=2, offload_optimizer_device="cpu")),
        (3, "optimizerAndParameters", DeepSpeedInEffect(zero_stage=3, offload_optimizer_device="cpu",
                                                        offload_param_device="cpu")),
    ],
    ids=["zero2", "zero2-offload-optimizer", "zero3-offload"],
)  # fmt: skip
def test_deepspeed_zero_on_two_cpu_ranks(
    tmp_path: Path, tiny_model_dir: Path, deepspeed_ops: None, stage: int, offload: str, expected: DeepSpeedInEffect
) -> None:
    data = tmp_path / "data"
    plan = two_processes_one_node(tmp_path, tiny_model_dir, data, distributedBackend="DeepSpeed", maxSteps=-1,
                                  numTrainEpochs=1.0, deepspeedZeroStage=stage, deepspeedOffload=offload)  # fmt: skip
    assert plan.training.deepspeed is not None and plan.training.deepspeed.zero_stage == stage
    proc = run_trainer(PYTHON, write_plan(plan, tmp_path), timeout=600)
    assert proc.returncode == EXIT_OK, tail(proc)
    result = read_result(plan)
    assert result.outcome == Outcome.SUCCEEDED, result.error
    m, env = result.metrics, result.environment
    assert m is not None and env is not None
    assert env.distributed_mode == "DEEPSPEED" and env.world_size == 2 and env.deepspeed == expected
    assert env.fsdp is None
    lengths = independent_lengths(tiny_model_dir, dataset_file(data), 1024)
    assert m.train_samples == len(lengths) == 16 and m.train_non_padding_tokens == sum(lengths)
    assert m.model_parameters == sum(p.numel() for p in _tiny_model(tiny_model_dir).parameters())


def _tiny_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)
