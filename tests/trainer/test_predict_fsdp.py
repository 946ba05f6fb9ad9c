"""The memory prediction of an FSDP run against real FSDP2 steps on two CPU ranks.

The prediction traces one rank's step with fake tensors on a fake process group of the run's ranks
(`trace_step(..., FsdpShape)`); here two real ranks run the same step over gloo with real weights
(`fsdp_step.py` under torch.distributed.run), each counted by the same `StorageTracker`. Every
phase's peak must agree within 5 % (issue 30's CPU target) on both ranks, for FULL_SHARD and
SHARD_GRAD_OP, full fine-tuning, LoRA and prompt tuning, checkpointing on and off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT, accuracy_row, current_python, fresh_doc_section, tail

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench.engines.envs import package_path  # noqa: E402
from ftbench.host.ports import free_port  # noqa: E402
from ftbench_trainer.predict.model import architecture_config, traced_fsdp  # noqa: E402
from ftbench_trainer.predict.shard import Sharding  # noqa: E402
from ftbench_trainer.predict.step import StepShape, Trace  # noqa: E402
from ftbench_trainer.predict.trace import trace_step  # noqa: E402

TOLERANCE = 0.05
RANKS = 2
CONFIG = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 512,
}  # fmt: skip
CASES = [  # (strategy, method, gradient checkpointing)
    ("FULL_SHARD", "full", True),
    ("FULL_SHARD", "full", False),
    ("FULL_SHARD", "lora", True),
    ("FULL_SHARD", "pt", False),
    ("SHARD_GRAD_OP", "full", True),
    ("SHARD_GRAD_OP", "lora", False),
]


def shape_of(method: str, checkpointing: bool) -> StepShape:
    return StepShape(
        method=method, dtype="float32", autocast=None, attention="sdpa", checkpointing=checkpointing, batch=2,
        seq=128, device="cpu", lora_targets=("q_proj", "v_proj"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    """Each case's per-rank phases from one torch.distributed.run of two real ranks."""
    tmp = tmp_path_factory.mktemp("fsdp-step")
    cases = [
        {
            "config": CONFIG,
            "shape": dataclasses.asdict(shape_of(method, ckpt)),
            "reshard_after_forward": traced_fsdp(Sharding(kind, RANKS)).reshard_after_forward,  # type: ignore[union-attr]
        }
        for kind, method, ckpt in CASES
    ]
    (tmp / "cases.json").write_text(json.dumps(cases))
    script = Path(__file__).with_name("fsdp_step.py")
    env = {**os.environ, "PYTHONPATH": package_path(), "OMP_NUM_THREADS": "1"}
    cmd = [current_python(), "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS)]
    proc = subprocess.run(
        [*cmd, "--master_port", str(free_port()), str(script), str(tmp / "cases.json"), str(tmp)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, tail(proc)
    return [
        [json.loads((tmp / f"case-{i}-rank-{r}.json").read_text()) for r in range(RANKS)] for i in range(len(CASES))
    ]


@pytest.fixture(scope="module")
def predicted() -> list[Trace]:
    """Each case traced with fake tensors as one rank of a fake two-rank process group."""
    config = architecture_config(CONFIG)
    traces = []
    for kind, method, ckpt in CASES:
        fsdp = traced_fsdp(Sharding(kind, RANKS))
        assert fsdp is not None
        traces.append(trace_step(config, shape_of(method, ckpt), fsdp))
    return traces


IDS = ["-".join(map(str, c)) for c in CASES]


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_prediction_matches_real_fsdp_ranks(measured: list[list[dict]], predicted: list[Trace], index: int) -> None:
    for rank, phases in enumerate(measured[index]):
        for phase, split in phases.items():
            real = sum(split.values())
            assert predicted[index].phases[phase].total == pytest.approx(real, rel=TOLERANCE), (rank, phase, split)


def test_the_docs_table_is_fresh(measured: list[list[dict]], predicted: list[Trace]) -> None:
    """docs/benchmarks.md's table of these cases: each rank's peak, predicted and measured."""
    rows = ["| case (FSDP2, 2 ranks) | rank | peak phase | predicted MiB | measured MiB | error |",
            "| --- | ---: | --- | ---: | ---: | ---: |"]  # fmt: skip
    for case_id, trace, ranks in zip(IDS, predicted, measured, strict=True):
        for rank, phases in enumerate(ranks):
            peak = max(phases, key=lambda p: sum(phases[p].values()))
            rows.append(accuracy_row([case_id, str(rank), peak], trace.phases[peak].total, sum(phases[peak].values())))
    fresh_doc_section(REPO_ROOT / "docs" / "benchmarks.md", "cpu-memory-fsdp", "\n".join(rows))
