"""How many parameters a catalog architecture has, and how many of them one token passes through.

The throughput prediction needs a model's FLOPs per token without loading it (the operator has no
torch): 2 FLOPs per multiply-accumulate of every weight a token meets. For a dense model that is
every matmul weight; for a mixture of experts only the `num_experts_per_tok` experts the router picks
(mixtral: 13 of its 47 billion). Counted from the catalog's `architecture` (config.json's sizes) by
the layouts transformers builds for each `model_type`; norms and biases are left out (under 0.1 % of
any catalog model). tests/unit/test_parameters.py holds every count against the parameters the memory
predictor traced from the real modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParameterCounts:
    """A model's weights: all of them, those one token multiplies (active), and the attention shape."""

    total: int
    active: int  # matmul weights one token meets: the lm head, attention, and the experts it is routed to
    layers: int
    attention_layers: int  # layers with softmax attention (the rest of a hybrid are Mamba layers)
    attention_width: int  # heads x head dimension: QK^T and AV cost 2 x this per token pair


class UnknownArchitecture(ValueError):
    """The catalog entry's architecture is not one whose layout is known here."""


def _get(arch: dict[str, Any], *names: str) -> int:
    for name in names:
        if arch.get(name) is not None:
            return int(arch[name])
    raise UnknownArchitecture(f"architecture has none of {', '.join(names)}")


def _attention(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q, k, v and o projections."""
    return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2


def _mamba(arch: dict[str, Any], hidden: int) -> int:
    """Mamba2 mixer: in_proj (x, z, B, C, dt) and out_proj; the short convolution is negligible."""
    d_inner = _get(arch, "mamba_n_heads") * _get(arch, "mamba_d_head")
    groups_state = 2 * _get(arch, "mamba_n_groups") * _get(arch, "mamba_d_state")
    return hidden * (2 * d_inner + groups_state + _get(arch, "mamba_n_heads")) + d_inner * hidden


def parameter_counts(arch: dict[str, Any]) -> ParameterCounts:
    """Counts for a catalog `architecture` (llama-like, mixtral, granitemoe, granitemoehybrid, gpt_bigcode)."""
    model_type = str(arch.get("model_type", ""))
    if model_type == "gpt_bigcode":
        return _gpt_bigcode(arch)
    hidden = _get(arch, "hidden_size")
    layers = _get(arch, "num_hidden_layers")
    heads = _get(arch, "num_attention_heads")
    kv_heads = int(arch.get("num_key_value_heads") or heads)
    head_dim = int(arch.get("head_dim") or hidden // heads)
    vocab = _get(arch, "vocab_size")
    intermediate = _get(arch, "intermediate_size")
    experts = int(arch.get("num_local_experts") or 0)
    per_token = int(arch.get("num_experts_per_tok") or 0)
    shared = int(arch.get("shared_intermediate_size") or 0)
    kinds = list(arch.get("layer_types") or ["attention"] * layers)
    if model_type not in ("llama", "mistral", "granite", "mixtral", "granitemoe", "granitemoehybrid"):
        raise UnknownArchitecture(f"model_type {model_type!r} has no known layout")
    gated_mlp = 3 * hidden  # gate, up and down projections: 3 x hidden x intermediate
    if experts:
        expert_total = experts * gated_mlp * intermediate
        expert_active = per_token * gated_mlp * intermediate
        router = hidden * experts
    else:
        expert_total = expert_active = router = 0
    if model_type == "granitemoehybrid":
        mlp_total = expert_total + router + gated_mlp * shared
        mlp_active = expert_active + router + gated_mlp * shared
    elif experts:
        mlp_total, mlp_active = expert_total + router, expert_active + router
    else:
        mlp_total = mlp_active = gated_mlp * intermediate
    attention = _attention(hidden, heads, kv_heads, head_dim)
    mixers = sum(attention if kind == "attention" else _mamba(arch, hidden) for kind in kinds)
    embedding = vocab * hidden
    head = 0 if arch.get("tie_word_embeddings") else vocab * hidden
    total = embedding + head + mixers + layers * mlp_total
    # The lm head multiplies every token whether or not it is tied to the embedding (a lookup).
    active = vocab * hidden + mixers + layers * mlp_active
    return ParameterCounts(
        total=total,
        active=active,
        layers=layers,
        attention_layers=kinds.count("attention"),
        attention_width=heads * head_dim,
    )


def _gpt_bigcode(arch: dict[str, Any]) -> ParameterCounts:
    """StarCoder-style: multi-query attention (one k/v head), a plain 4x MLP, learned positions."""
    hidden = _get(arch, "n_embd", "hidden_size")
    layers = _get(arch, "n_layer", "num_hidden_layers")
    heads = _get(arch, "n_head", "num_attention_heads")
    inner = int(arch.get("n_inner") or 4 * hidden)
    vocab = _get(arch, "vocab_size")
    head_dim = hidden // heads
    kv_heads = 1 if arch.get("multi_query", True) else heads
    per_layer = _attention(hidden, heads, kv_heads, head_dim) + 2 * hidden * inner
    positions = int(arch.get("n_positions") or 0) * hidden
    total = vocab * hidden + positions + layers * per_layer
    return ParameterCounts(
        total=total,
        active=vocab * hidden + layers * per_layer,
        layers=layers,
        attention_layers=layers,
        attention_width=hidden,
    )
