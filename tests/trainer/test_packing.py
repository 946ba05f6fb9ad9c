"""Packing that really isolates samples, and counts that stay exact.

The isolation test takes a batch from trl's own packing pipeline (the SFTTrainer ftbench builds:
best-fit-decreasing packing, padding-free collator) and checks that every packed sample's loss is
the loss of the same sample run alone; with a cache in the forward it is not (the test would
catch cross-contamination). The run test trains with packing and checks the
counts: no padding, one sample per packed sequence, and the isolation recorded from the batches.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from helpers import make_plan, read_result, run_trainer, tail, write_plan

from ftbench.contracts.results import EXIT_OK, Outcome

pytestmark = [pytest.mark.training]
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"


def _samples(position_ids) -> list[tuple[int, int]]:
    """(start, end) of each packed sample: a sample starts where its position id is 0."""
    return list(pairwise([*(position_ids[0] == 0).nonzero().flatten().tolist(), position_ids.shape[1]]))


def _losses(logits, labels, position_ids) -> list[float]:
    """Each packed sample's mean next-token loss (the boundary token's label is -100 already)."""
    import torch

    return [
        float(torch.nn.functional.cross_entropy(logits[0, a : b - 1], labels[0, a + 1 : b], ignore_index=-100))
        for a, b in _samples(position_ids)
    ]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_packed_sample_trains_as_it_would_alone(tmp_path: Path, tiny_model_dir: Path, attention: str) -> None:
    """A batch from the SFTTrainer ftbench builds, through the model as the Trainer calls it
    (`model(**batch)`, training mode): every packed sample's loss is its loss alone. The same forward
    with a cache (as at inference) is not isolated, so the comparison would catch a leak."""
    import torch

    from ftbench_trainer.engines.run import EngineRun
    from ftbench_trainer.engines.trl import build_trainer
    from ftbench_trainer.inputs import resolve_dataset
    from ftbench_trainer.measure.callback import MeasureCallback
    from ftbench_trainer.packing import POSITION_IDS, isolation

    plan = make_plan(tmp_path, tiny_model_dir, tmp_path / "data", packing=True, attentionImplementation=attention)
    dataset, _ = resolve_dataset(plan)
    run = EngineRun(plan, str(tiny_model_dir), dataset, MeasureCallback(plan, dataset_tokens_per_sample=0.0))
    trainer = build_trainer(run, [])
    batch = next(iter(trainer.get_train_dataloader()))
    assert isolation(batch, attention) == POSITION_IDS
    ids, labels, pos = batch["input_ids"], batch["labels"], batch["position_ids"]
    assert ids.shape[0] == 1 and "attention_mask" not in batch
    assert int((pos == 0).sum()) >= 4  # several samples flattened into one row
    model = trainer.model.train()
    with torch.no_grad():
        packed = _losses(model(**batch).logits, labels, pos)
        alone = [
            _losses(model(input_ids=ids[:, a:b], labels=labels[:, a:b]).logits, labels[:, a:b], pos[:, a:b])[0]
            for a, b in _samples(pos)
        ]
        leaky = _losses(model(**batch, use_cache=True).logits, labels, pos)
    assert packed == pytest.approx(alone, abs=1e-5)
    assert max(abs(x - y) for x, y in zip(leaky[1:], alone[1:], strict=True)) > 1e-3


@pytest.mark.slow
def test_a_packed_run_counts_real_tokens_and_samples(tmp_path: Path, tiny_model_dir: Path) -> None:
    plans = {p: make_plan(tmp_path / str(p), tiny_model_dir, tmp_path / "data", packing=p, maxSteps=2) for p in (True, False)}  # fmt: skip
    results = {}
    for packing, plan in plans.items():
        (tmp_path / str(packing)).mkdir(exist_ok=True)
        proc = run_trainer(PYTHON, write_plan(plan, tmp_path / str(packing)))
        assert proc.returncode == EXIT_OK, tail(proc)
        results[packing] = read_result(plan)
    packed, unpacked = results[True], results[False]
    assert packed.outcome == Outcome.SUCCEEDED and packed.metrics is not None and packed.environment is not None
    m = packed.metrics
    assert m.train_tokens == m.train_non_padding_tokens  # no padding trained
    assert m.train_non_padding_tokens_per_step == m.train_non_padding_tokens / m.train_steps
    u = unpacked.metrics
    assert u is not None and m.train_non_padding_tokens_per_step > u.train_non_padding_tokens_per_step
    assert m.train_samples >= 2 * 4  # at least batchSize rows' worth of samples per step
    assert packed.environment.packing == "positionIds"
    assert unpacked.environment is not None and unpacked.environment.packing == ""
    assert unpacked.metrics is not None and unpacked.metrics.train_tokens > unpacked.metrics.train_non_padding_tokens
