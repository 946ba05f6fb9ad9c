"""The reduced-depth trace (predict.depth) against the trace of the whole model, and what makes MoE and
hybrid models traceable (predict.traceable): every phase within 1 % for a dense model (full fine-tuning
and LoRA, one rank and one rank of FSDP2), an MoE model under balanced routing and a Mamba/attention
hybrid, with Mamba-2 as the fused kernels run it and as transformers' torch path does."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from ftbench.contracts.prediction import MAMBA_KERNELS_ENV
from ftbench_trainer.predict.depth import layer_kinds, trace_scaled, traced_depths, with_layers
from ftbench_trainer.predict.model import architecture_config
from ftbench_trainer.predict.trace import FsdpShape, StepShape, trace_step
from ftbench_trainer.predict.traceable import balanced_sizes

DENSE = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096, "tie_word_embeddings": False}  # fmt: skip
MOE = {"model_type": "granitemoe", "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 7,
       "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048, "tie_word_embeddings": True,
       "num_local_experts": 8, "num_experts_per_tok": 2}  # fmt: skip
HYBRID = {"model_type": "granitemoehybrid", "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 10,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "tie_word_embeddings": True,
          "num_local_experts": 4, "num_experts_per_tok": 2, "shared_intermediate_size": 128, "mamba_n_heads": 8,
          "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2,
          "mamba_chunk_size": 64, "position_embedding_type": "nope",
          "layer_types": ["mamba"] * 4 + ["attention"] + ["mamba"] * 4 + ["attention"]}  # fmt: skip


def shape(method: str, seq: int = 128) -> StepShape:
    return StepShape(method=method, dtype="bfloat16", autocast=None, attention="sdpa", checkpointing=True, batch=2,
                     seq=seq, lora_r=4, lora_alpha=16, lora_targets=("q_proj", "v_proj"))  # fmt: skip


def assert_scaled_matches(architecture: dict, method: str, fsdp: FsdpShape | None = None) -> None:
    config = architecture_config(architecture)
    whole, scaled = trace_step(config, shape(method), fsdp), trace_scaled(config, shape(method), fsdp)
    assert scaled.parameters == whole.parameters and scaled.trainable == whole.trainable
    for phase, split in whole.phases.items():
        assert scaled.phases[phase].total == pytest.approx(split.total, rel=0.01), phase


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_dense_model_scales_to_its_whole_trace(method: str):
    assert_scaled_matches(DENSE, method)


def test_one_rank_of_fsdp2_scales_to_its_whole_trace():
    assert_scaled_matches(DENSE, "lora", FsdpShape(ranks=2, reshard_after_forward=True))


def test_an_moe_model_is_traced_with_balanced_routing_and_scales():
    assert_scaled_matches(MOE, "full")
    assert balanced_sizes(10, 4) == [3, 3, 2, 2] and sum(balanced_sizes(4096 * 8, 40)) == 4096 * 8


@pytest.mark.parametrize("kernels", ["true", "false"])
def test_a_hybrid_model_scales_by_each_kind_of_layer(kernels: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MAMBA_KERNELS_ENV, kernels)
    config = architecture_config(HYBRID)
    kinds = layer_kinds(config)  # transformers 5 calls them linear_attention and full_attention
    attention = kinds[4]
    assert len(set(kinds)) == 2 and kinds.count(attention) == 2
    assert layer_kinds(with_layers(config, [kinds[0], attention])) == [kinds[0], attention]
    assert_scaled_matches(HYBRID, "lora")


@pytest.mark.parametrize("method", ["lora", "full"])
def test_mambas_torch_path_scales_from_the_lowest_layer_backward_reaches(method: str, monkeypatch: pytest.MonkeyPatch):
    """Under attention-only LoRA backward stops at the first attention layer, so the base starts there; under full
    fine-tuning at the first layer (a Mamba one), where its tail (Trace.tails) is the peak at full depth."""
    monkeypatch.setenv(MAMBA_KERNELS_ENV, "false")
    config = architecture_config(HYBRID)
    kinds = layer_kinds(config)
    base, increments = traced_depths(config, shape(method))
    assert increments, "scaled, not traced whole"
    assert layer_kinds(base)[0] == (kinds[4] if method == "lora" else kinds[0])
    assert_scaled_matches(HYBRID, method)


def test_the_kernels_hold_less_than_the_torch_path_of_mamba(monkeypatch: pytest.MonkeyPatch):
    config = architecture_config(HYBRID)
    monkeypatch.setenv(MAMBA_KERNELS_ENV, "false")
    torch_path = trace_step(config, shape("lora", seq=1024))
    monkeypatch.setenv(MAMBA_KERNELS_ENV, "true")
    kernels = trace_step(config, shape("lora", seq=1024))
    assert kernels.phases["forward"].other < torch_path.phases["forward"].other / 2
