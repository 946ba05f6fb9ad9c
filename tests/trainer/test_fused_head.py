"""trl's fused LM head traced on its GPU branch (predict.fused_head) against trl's own Triton kernels: the storages a
step makes and frees inside the head, traced on fake tensors with the kernels stood in, are those the real kernels
(run by Triton's interpreter on CPU tensors) make, tile for tile, for full fine-tuning, LoRA and prompt tuning (whose
virtual tokens carry no label); and the CPU branch stays the one a prediction for the CPU traces."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("triton")

from test_predict_depth import DENSE, shape

from ftbench_trainer.measure.ledger import NEW
from ftbench_trainer.predict.fused_head import KERNEL_NAMES, TILE_TOKENS, VOCABULARY_TILE
from ftbench_trainer.predict.model import architecture_config
from ftbench_trainer.predict.stack import SFT_FUSED_OUTPUTS
from ftbench_trainer.predict.step_family import FUSED_HEAD_TILE_TOKENS
from ftbench_trainer.predict.trace import recorded_step

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_trl_has_what_its_gpu_branch_is_traced_by() -> None:
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    assert all(hasattr(chunked_logprob, name) for name in KERNEL_NAMES) and hasattr(utils, VOCABULARY_TILE)
    assert getattr(chunked_logprob, TILE_TOKENS) == FUSED_HEAD_TILE_TOKENS


# method, batch, sequence, tokens per tile, words per tile: two or more tiles of each, the last one partial.
RUNS = {"full": ("full", 3, 40, 64, 256), "lora": ("lora", 2, 40, 64, 256), "pt": ("pt", 2, 30, 64, 300)}


@pytest.mark.parametrize("run", RUNS)
def test_the_traced_gpu_branch_makes_what_trls_triton_kernels_make(run: str) -> None:
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "trainer-image"), str(REPO)]),
    }
    args = [str(a) for a in RUNS[run]]
    done = subprocess.run(
        [sys.executable, str(HERE / "fused_head_triton.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    logs = json.loads(done.stdout)
    made = [e for e in logs["real"] if e[0] == NEW]
    assert len(made) > 10, "the head's storages were seen"
    assert logs["traced"] == logs["real"]
    # The marked tile buffers (step_family sizes them by rows): forward's and backward's, of float32 rows.
    method, batch, seq, tokens, words = RUNS[run]
    rows = min(tokens, batch * seq if method == "pt" else batch * (seq - 1))
    assert logs["tiles"] == [[NEW, rows * words * 4]] * 2


def test_a_step_predicted_for_the_cpu_keeps_the_cpu_branch() -> None:
    """On a CPU trl folds each tile in torch ops, making temporaries per tile: more storages at more tiles."""
    config = architecture_config(DENSE)
    fused = dataclasses.replace(shape("full"), fused_lm_head=SFT_FUSED_OUTPUTS)

    def made(device: str, batch: int) -> int:
        step = dataclasses.replace(fused, device=device, batch=batch)  # type: ignore[arg-type]
        return sum(1 for e in recorded_step(config, step).log if e[0] == NEW)

    one_tile, two_tiles = 2, (FUSED_HEAD_TILE_TOKENS // (fused.seq - 1)) + 2
    assert made("cpu", two_tiles) > made("cpu", one_tile)
    assert made("cuda", two_tiles) == made("cuda", one_tile)
