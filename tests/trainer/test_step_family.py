"""A step family (predict.step_family) against direct traces: the step replayed at another per-device batch or
FSDP2 rank count is the trace made there, field for field (all but `seconds`), for a dense model (full, LoRA,
prompt tuning; one rank and FSDP2), an MoE model and a Mamba/attention hybrid, with trl's fused LM head across
the batch that fills its tile buffer, one row over rank counts, and FSDP2's padded shards (an odd vocabulary,
LoRA's rows over more ranks); and where a family cannot say (one row, a rank count that pads the shards of several
row counts, recordings that disagree) it says it cannot."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from test_predict_depth import DENSE, HYBRID, MOE, shape

from ftbench.contracts.env import FTBENCH_TRACE_CACHE
from ftbench_trainer.measure.ledger import END, Ledger, replay, sized_events
from ftbench_trainer.predict import depth, trace_store
from ftbench_trainer.predict.depth import scaled_family, trace_scaled
from ftbench_trainer.predict.model import architecture_config, step_trace
from ftbench_trainer.predict.stack import SFT_FUSED_OUTPUTS
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace
from ftbench_trainer.predict.step_family import family
from ftbench_trainer.predict.trace import recorded_step

ODD = {**DENSE, "vocab_size": 4099}
GRANITE_33 = {**DENSE, "vocab_size": 49159}


def untimed(trace: Trace) -> Trace:
    return dataclasses.replace(trace, seconds=0.0)


def direct(config: Any, step: StepShape, fsdp: FsdpShape | None) -> Trace:
    depth._cache.clear()  # nothing the family's recordings left behind
    return trace_scaled(config, step, fsdp)


CASES = {
    "dense full": (DENSE, "full", None, [(3, None), (5, None), (9, None)]),
    # lora_r 4: 8 and 16 ranks pad its rows, whose terms the third rank count (8) gives
    "dense lora fsdp2": (DENSE, "lora", FsdpShape(4, True), [(3, 4), (2, 2), (5, 2), (3, 8), (2, 16)]),
    # An odd vocabulary (granite-3's 49155 rows) pads at every rank count: recorded at 4, 2, 8 or at 8, 4, 2
    "odd vocabulary full fsdp2": (ODD, "full", FsdpShape(4, True), [(3, 4), (3, 16), (2, 32)]),
    "odd vocabulary full fsdp2 from 8": (ODD, "full", FsdpShape(8, True), [(2, 8), (3, 16), (4, 4)]),
    # granite-3.3's 49159 rows: 2, 4 and 8 ranks pad them alike, so the third rank count is 16
    "granite-3.3 vocabulary full fsdp2": (GRANITE_33, "full", FsdpShape(4, True), [(2, 8), (3, 32)]),
    # and beside LoRA's 4 rows, two row counts that pad: recorded at 4, 2, 8 and 16 ranks
    "granite-3.3 vocabulary lora fsdp2": (GRANITE_33, "lora", FsdpShape(4, True), [(2, 8), (3, 32)]),
    "dense pt shard-grad-op": (DENSE, "pt", FsdpShape(2, False), [(4, 2), (3, 4), (6, 4)]),  # 20 tokens: 8 pad
    "moe full fsdp2": (MOE, "full", FsdpShape(2, True), [(3, 2), (7, 2), (4, 4)]),
    "hybrid lora": (HYBRID, "lora", None, [(3, None), (6, None)]),
    "hybrid full fsdp2": (HYBRID, "full", FsdpShape(2, True), [(3, 2), (5, 2)]),  # Mamba's torch path: tails
}


@pytest.mark.parametrize("case", CASES)
def test_a_family_replays_the_trace_made_there(case: str) -> None:
    architecture, method, fsdp, targets = CASES[case]
    config = architecture_config(architecture)
    step = shape(method)
    depth._cache.clear()
    found = scaled_family(config, step, fsdp)
    assert found is not None
    for batch, ranks in targets:
        assert found.answers(batch, ranks), (batch, ranks)
        there = dataclasses.replace(step, batch=batch)
        at_ranks = dataclasses.replace(fsdp, ranks=ranks) if fsdp is not None and ranks is not None else None
        assert untimed(found.at(batch, ranks)) == untimed(direct(config, there, at_ranks)), (batch, ranks)


# trl's fused LM head on its GPU branch (predict.fused_head): at 128 tokens a row its 4096-token tile buffer fills
# from 33 rows on; below that its rows are the labelled tokens. The family sizes the buffer by that rule, so it
# holds on both sides, whichever side it was recorded on. Asked batch, then replayed (batch, ranks).
FUSED = {
    "dense full, recorded below the fill": (
        DENSE,
        "full",
        None,
        128,
        3,
        [(2, None), (32, None), (33, None), (40, None)],
    ),
    "dense lora fsdp2, recorded past it": (DENSE, "lora", FsdpShape(2, True), 128, 40, [(33, 2), (50, 4), (2, 2)]),
    "moe full, recorded across it": (MOE, "full", None, 128, 31, [(2, None), (10, None), (40, None)]),  # 31-33
    "dense pt, virtual tokens unlabelled": (DENSE, "pt", None, 128, 3, [(2, None), (32, None), (40, None)]),
    "dense full, 2048 tokens a row": (DENSE, "full", None, 2048, 2, [(3, None), (5, None)]),
}


@pytest.mark.parametrize("case", FUSED)
def test_a_family_with_trls_fused_head_replays_across_its_fill(case: str) -> None:
    architecture, method, fsdp, seq, batch, targets = FUSED[case]
    config = architecture_config(architecture)
    step = dataclasses.replace(shape(method, seq=seq), batch=batch, fused_lm_head=SFT_FUSED_OUTPUTS)
    depth._cache.clear()
    found = scaled_family(config, step, fsdp)
    assert found is not None and found.base.tile_row_bytes is not None
    for batch, ranks in targets:
        assert found.answers(batch, ranks), (batch, ranks)
        there = dataclasses.replace(step, batch=batch)
        at_ranks = dataclasses.replace(fsdp, ranks=ranks) if fsdp is not None and ranks is not None else None
        assert untimed(found.at(batch, ranks)) == untimed(direct(config, there, at_ranks)), (batch, ranks)


@pytest.mark.parametrize("architecture", [DENSE, ODD], ids=["even rows", "odd vocabulary"])
def test_one_row_has_a_family_of_rank_counts(architecture: dict[str, Any]) -> None:
    """One row per device is a step of its own (FEWEST_ROWS), where doubled GPUs take two rows: under FSDP2 its
    family replays it at other rank counts, padded shards too (granite-3's GPUs doubled)."""
    config = architecture_config(architecture)
    step = dataclasses.replace(shape("full"), batch=1)
    depth._cache.clear()
    found = scaled_family(config, step, FsdpShape(4, True))
    assert found is not None
    for ranks in (4, 2, 8, 16):
        assert found.answers(1, ranks)
        assert untimed(found.at(1, ranks)) == untimed(direct(config, step, FsdpShape(ranks, True))), ranks
    assert not found.answers(2, 4)


def test_what_a_family_cannot_say_it_does_not() -> None:
    config = architecture_config(DENSE)
    step = shape("lora")
    found = scaled_family(config, step, FsdpShape(4, True))
    assert found is not None
    assert not found.answers(1, 4)  # one row is another step: torch skips copies of size-1 dimensions
    assert not found.answers(2, 3)  # three ranks pad the shards of several row counts (256, 512, 4096)
    assert not found.answers(2, None)  # no FSDP2 is another step
    one_row = scaled_family(config, dataclasses.replace(step, batch=1), FsdpShape(4, True))
    assert one_row is not None and one_row.answers(1, 2) and not one_row.answers(2, 4)  # rank counts only
    with pytest.raises(ValueError, match="does not hold"):
        found.at(1, 4)
    # Steps that do not replay keep no family: one row without FSDP2, and trl's fused LM head on the CPU (its fold
    # makes temporaries for each tile of tokens).
    assert scaled_family(config, dataclasses.replace(step, batch=1), None) is None
    on_cpu = dataclasses.replace(step, fused_lm_head=("log_probs",), device="cpu")
    assert scaled_family(config, on_cpu, None) is None
    one = recorded_step(config, dataclasses.replace(step, batch=1))
    two = recorded_step(config, dataclasses.replace(step, batch=2))
    with pytest.raises(ValueError, match="outside the span"):
        family([one, two])
    assert family([one, two], span=(1, None)) is None  # their events differ: no family even where let try


def test_the_ledger_logs_the_step_only() -> None:
    ledger = Ledger(record=True)
    serial = ledger.new_storage(1000)
    ledger.enter_phase("backward")
    ledger.finish()
    ledger.free_storage(serial)  # the model torn down after the step: not the step's
    assert ledger.log is not None and ledger.log[-1] == [END]


def test_a_phase_tail_is_its_peak_from_the_last_mark_on_and_replays() -> None:
    ledger = Ledger(record=True)
    ledger.enter_phase("backward")
    early = ledger.new_storage(4096)  # the loss: the phase's peak
    ledger.free_storage(early)
    ledger.enter_tail()  # a higher layer's backward: superseded by the next mark
    ledger.new_storage(1024)
    ledger.enter_tail()  # the lowest layer's
    late = ledger.new_storage(2048)
    ledger.free_storage(late)
    ledger.finish()
    assert ledger.peaks["backward"].bytes == 4096 and ledger.tails["backward"].bytes == 1024 + 2048
    assert ledger.log is not None
    again = replay(ledger.log, sized_events(ledger.log))
    assert (
        again.tails["backward"].bytes == 1024 + 2048 and again.tails["backward"].live == ledger.tails["backward"].live
    )


def test_the_store_answers_another_batch_and_rank_count_without_a_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FTBENCH_TRACE_CACHE, str(tmp_path))
    config = architecture_config(DENSE)
    step, fsdp, source = shape("full"), FsdpShape(4, True), repr(sorted(DENSE.items()))
    step_trace(lambda: config, step, fsdp, source)
    assert len(list(tmp_path.glob("*.json"))) == 2  # the trace and its family
    trace_store._families.clear()  # read it from the file, as a new process does

    def no_config() -> Any:
        raise AssertionError("traced: the family should have answered")

    other_step, other_fsdp = dataclasses.replace(step, batch=6), FsdpShape(8, True)
    kept = step_trace(no_config, other_step, other_fsdp, source)
    assert untimed(kept) == untimed(direct(config, other_step, other_fsdp))
