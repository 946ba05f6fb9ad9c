"""The memory predictor against real training steps on CPU, counted by the same tracker.

The prediction traces the step with fake tensors; here the same architecture trains for real
(real weights, real forward, backward, clipping and AdamW on CPU) under the same `StorageTracker`,
so the two peaks are the same quantity and must agree within 5 % (issue 30's CPU target) for
full fine-tuning, LoRA and prompt tuning, with and without gradient checkpointing, and for both
optimizer paths (per-tensor as on CPU, foreach as on CUDA).
"""

from __future__ import annotations

import pytest
from helpers import REPO_ROOT, accuracy_row, fresh_doc_section

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench_trainer.measure.ledger import allocator_bytes  # noqa: E402
from ftbench_trainer.measure.storage import StorageTracker  # noqa: E402
from ftbench_trainer.predict.model import sizes_of  # noqa: E402
from ftbench_trainer.predict.shard import Sharding, shard  # noqa: E402
from ftbench_trainer.predict.step import StepShape  # noqa: E402
from ftbench_trainer.predict.trace import add_adapter, build_model, run_steps, trace_step  # noqa: E402

TOLERANCE = 0.05


def small_llama():
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
        vocab_size=2048, max_position_embeddings=512,
    )  # fmt: skip


def measured(config, shape: StepShape):
    """The same steps on a real model (real tensors on CPU), under the same tracker."""
    torch.manual_seed(0)
    model = add_adapter(build_model(config, shape, device="cpu"), shape)
    return run_steps(
        model, shape, StorageTracker(), make_batch=lambda: torch.randint(0, config.vocab_size, (shape.batch, shape.seq))
    )


CASES = [
    pytest.param(method, ckpt, device, id=f"{method}-{'ckpt' if ckpt else 'no-ckpt'}-{device}")
    for method in ("full", "lora", "pt")
    for ckpt in (True, False)
    for device in ("cpu", "cuda")
]


@pytest.fixture(scope="module")
def traced_and_real():
    """Each case's prediction and its real step, by case id."""
    config = small_llama()
    out = {}
    for case in CASES:
        method, checkpointing, device = case.values
        shape = StepShape(
            method=method, dtype="float32", autocast=None, attention="sdpa", checkpointing=checkpointing, batch=2,
            seq=128, device=device, lora_targets=("q_proj", "v_proj"), lora_dropout=0.05,
        )  # fmt: skip
        out[case.id] = (trace_step(config, shape), measured(config, shape))
    return out


@pytest.mark.parametrize(("method", "checkpointing", "device"), CASES)
def test_prediction_matches_a_real_step(traced_and_real, request, method, checkpointing, device):
    predicted, real = traced_and_real[request.node.callspec.id]
    assert predicted.parameters == real.parameters and predicted.trainable == real.trainable
    for phase, split in real.phases.items():
        ours = predicted.phases[phase]
        assert ours.total == pytest.approx(split.total, rel=TOLERANCE), (phase, ours, split)
    assert predicted.peak_phase == real.peak_phase


def test_the_docs_table_is_fresh(traced_and_real):
    """docs/benchmarks.md's table of these cases: each step's peak, predicted and measured."""
    rows = [
        "| case (1 rank) | peak phase | predicted MiB | measured MiB | error |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for case_id, (predicted, real) in traced_and_real.items():
        peak = real.peak_phase
        rows.append(accuracy_row([case_id, peak], predicted.phases[peak].total, real.phases[peak].total))
    fresh_doc_section(REPO_ROOT / "docs" / "benchmarks.md", "cpu-memory-1-rank", "\n".join(rows))


def test_gradient_accumulation_keeps_gradients_through_the_second_micro_batch():
    config = small_llama()
    base = dict(method="full", dtype="float32", autocast=None, attention="sdpa", checkpointing=True, batch=2, seq=64)
    one = trace_step(config, StepShape(**base))
    two = trace_step(config, StepShape(**base, gradient_accumulation=4))
    # The second micro-batch's forward runs with the first one's gradients live.
    assert two.phases["forward"].gradients > 0 == one.phases["forward"].gradients
    assert two.phases["forward"].total > one.phases["forward"].total


def test_full_fine_tuning_peaks_at_the_optimizer_step_with_five_model_sizes():
    """Half-precision parameters, gradients, two AdamW moments and foreach's one temporary (the note's 5x)."""
    config = small_llama()
    shape = StepShape(method="full", dtype="float16", autocast=None, attention="sdpa", checkpointing=True, batch=1,
                      seq=32, device="cuda")  # fmt: skip
    trace = trace_step(config, shape)
    opt = trace.phases["optimizer"]
    assert trace.peak_phase == "optimizer"
    assert opt.total == pytest.approx(5 * trace.parameter_bytes, rel=0.02)


def test_sharding_divides_what_full_shard_shards_and_adds_the_gathered_layers():
    config = small_llama()
    shape = StepShape(
        method="full", dtype="float32", autocast=None, attention="sdpa", checkpointing=True, batch=2, seq=64
    )
    trace = trace_step(config, shape)
    sizes = sizes_of(trace)
    layer = sizes.layer
    sharded = shard(trace.phases, Sharding("FULL_SHARD", 4), sizes)
    whole = trace.phases["backward"]
    assert sharded["backward"].parameters == -(-whole.parameters // 4) + 2 * layer
    assert sharded["backward"].gradients == -(-whole.gradients // 4) + layer
    assert sharded["backward"].other == whole.other
    grads_only = shard(trace.phases, Sharding("SHARD_GRAD_OP", 4), sizes)
    assert grads_only["optimizer"].parameters == trace.phases["optimizer"].parameters
    ddp = shard(trace.phases, Sharding("ddp", 4), sizes)
    assert ddp["forward"].gradients == trace.phases["forward"].gradients + max(
        s.gradients for s in trace.phases.values()
    )
    # FSDP1 keeps the root unit (embeddings, norm, LM head) gathered through forward and backward, and its
    # unsharded gradient through backward; with float32 master weights what trains is twice the bytes.
    fsdp1 = shard(trace.phases, Sharding("FULL_SHARD", 4, fsdp1=True, master_factor=2.0), sizes)
    assert sizes.root > 0 and sizes.root_trainable == sizes.root
    assert fsdp1["backward"].parameters == -(-(whole.parameters + sizes.trainable) // 4) + 2 * layer + sizes.root
    assert fsdp1["backward"].gradients == -(-2 * whole.gradients // 4) + layer + sizes.root
    # Offload: parameters, gradients and optimizer state on the host; what is gathered stays on the device.
    offload = shard(trace.phases, Sharding("FULL_SHARD", 4, offload_parameters=True, offload_optimizer=True), sizes)
    assert offload["optimizer"].total == 0
    assert offload["backward"].parameters == 2 * layer and offload["backward"].gradients == layer
    assert offload["backward"].optimizer == 0


def test_allocator_rounding():
    assert [allocator_bytes(n) for n in (0, 1, 512, 513)] == [0, 512, 512, 1024]


def test_fast_moe_places_the_experts_per_expert_parallel_rank_outside_fsdp():
    """fastMoe k: each rank holds 1/k of the experts in the load dtype (no float32 master copy), the rest is
    FSDP1's as usual, and a layer is gathered without its experts (they compute where they are)."""
    from ftbench_trainer.measure.split import Split
    from ftbench_trainer.predict.shard import Sizes, shard_phase

    gib = 2**30
    sizes = Sizes(parameters=10 * gib, trainable=10 * gib, layer=gib, root=0, root_trainable=0,
                  experts=8 * gib, experts_trainable=8 * gib, layer_experts=gib // 2)  # fmt: skip
    forward = Split(parameters=10 * gib, gradients=0, optimizer=20 * gib, other=0)
    plain = shard_phase(forward, "forward", Sharding("FULL_SHARD", 8, fsdp1=True, master_factor=2.0), sizes,
                        gradient_bytes=0)  # fmt: skip
    ep = shard_phase(forward, "forward", Sharding("FULL_SHARD", 8, fsdp1=True, master_factor=2.0, expert_parallel=4),
                     sizes, gradient_bytes=0)  # fmt: skip
    assert plain.parameters == (10 + 10) * gib // 8 + gib  # float32 shards plus the gathered layer
    assert ep.parameters == (2 + 2) * gib // 8 + 8 * gib // 4 + gib // 2  # experts 1/4 each, layer without them
    assert plain.optimizer == 2 * 20 * gib // 8 and ep.optimizer == 2 * 4 * gib // 8 + 16 * gib // 4
