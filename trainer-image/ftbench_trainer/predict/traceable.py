"""What fake tensors cannot trace, made traceable: MoE routing (every expert gets its even share of
tokens), the checks of a mask's values that a training step's shapes already answer, and Mamba-2
layers as mamba_ssm's fused kernels run them on a GPU.

transformers 4.x routes tokens with data-dependent shapes, which stop a trace; `balance_routing(model)`
gives those modules a forward that computes the same tensors in the same order, with the token slots
dealt to the experts in equal shares (transformers 5.x needs nothing). Balanced routing gives exactly
what the step keeps for backward, not a single expert's worst transient; the notes of a prediction say so.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/predict/traceable.py".
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from ftbench_trainer.predict.stack import mamba_kernels

NOTE = (
    "MoE routing traced balanced ({experts} experts, top-{top_k}: each expert gets tokens x {top_k} / {experts} "
    "slots); what backward keeps is the same for any routing, one expert's transient can be up to "
    "{ratio:g}x larger if the router sends it every token"
)


def balanced_sizes(slots: int, experts: int) -> list[int]:
    """`slots` token slots dealt to `experts` experts as evenly as integers allow."""
    share, extra = divmod(slots, experts)
    return [share + (1 if e < extra else 0) for e in range(experts)]


def _balanced_gating(self: Any, hidden_states: torch.Tensor) -> tuple[Any, ...]:
    """GraniteMoe*TopKGating.forward (transformers 4.45-4.55) with the expert sizes balanced."""
    logits = self.layer(hidden_states).float()
    top_k_logits, top_k_indices = logits.topk(self.top_k, dim=1)
    top_k_gates = torch.softmax(top_k_logits, dim=1).type_as(hidden_states)
    zeros = torch.zeros([top_k_gates.size(0), self.num_experts], dtype=top_k_gates.dtype, device=top_k_gates.device)
    gates = zeros.scatter(1, top_k_indices, 1)
    gates.long().sum(0)  # the count the engine reads back; its values are what balancing fixes
    expert_size = balanced_sizes(top_k_indices.numel(), self.num_experts)
    _, index_sorted_experts = top_k_indices.flatten().sort(0)
    batch_index = index_sorted_experts.div(self.top_k, rounding_mode="trunc")
    batch_gates = top_k_gates.flatten()[index_sorted_experts]
    return index_sorted_experts, batch_index, batch_gates, expert_size, logits


def _balanced_sparse_block(self: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MixtralSparseMoeBlock.forward (transformers 4.45-4.55) with each expert's tokens fixed."""
    batch_size, sequence_length, hidden_dim = hidden_states.shape
    hidden_states = hidden_states.view(-1, hidden_dim)
    router_logits = self.gate(hidden_states)
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
    routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(hidden_states.dtype)
    final = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
    mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
    start = 0
    for expert, share in enumerate(balanced_sizes(selected_experts.numel(), self.num_experts)):
        slots = torch.arange(start, start + share)
        start += share
        top_x, idx = slots // self.top_k, slots % self.top_k
        current = hidden_states[None, top_x].reshape(-1, hidden_dim)
        out = self.experts[expert](current) * routing_weights[top_x, idx, None]
        final.index_add_(0, top_x, out.to(hidden_states.dtype))
    del mask
    return final.reshape(batch_size, sequence_length, hidden_dim), router_logits


def _is_gating(module: Any) -> bool:
    return type(module).__name__.endswith("TopKGating") and hasattr(module, "layer") and hasattr(module, "top_k")


def _is_sparse_block(module: Any) -> bool:
    experts = getattr(module, "experts", None)
    return (
        type(module).__name__.endswith("SparseMoeBlock")
        and isinstance(experts, torch.nn.ModuleList)
        and hasattr(module, "gate")
        and hasattr(module, "top_k")
    )


def _no_mamba_mask(self: Any, attention_mask: Any, cache_position: Any) -> Any:
    """GraniteMoeHybrid/Bamba `_update_mamba_mask` without its value checks: a training step has no cache
    (cache_position starts at 0) and the trace passes no attention mask, so the answer is the mask itself."""
    return attention_mask


class _Mamba2Kernel(torch.autograd.Function):
    """What mamba_ssm's `mamba_split_conv1d_scan_combined` allocates and keeps, in place of the computation
    (mamba_ssm/ops/triton/ssd_combined.py, MambaSplitConv1dScanCombinedFn): forward keeps the input
    projection (zxbcdt), the scan's output (out_x) and the gated norm's float32 rstd, and makes the norm's
    output and the out projection; backward makes a gradient for each input. transformers' torch path
    instead materialises the chunked scan's intermediates, several times larger."""

    @staticmethod
    def forward(ctx: Any, zxbcdt: torch.Tensor, inner: int, out_weight: torch.Tensor, *weights: torch.Tensor) -> Any:
        batch, seq, _ = zxbcdt.shape
        out_x = zxbcdt.new_empty(batch, seq, inner)
        rstd = torch.empty(batch * seq, dtype=torch.float32)
        normed = zxbcdt.new_empty(batch, seq, inner)
        ctx.save_for_backward(zxbcdt, out_x, rstd, out_weight, *weights)
        return F.linear(normed, out_weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        zxbcdt, _, _, out_weight, *weights = ctx.saved_tensors
        grad @ out_weight  # the gradient through the out projection, then the scan's
        grads = [torch.empty_like(zxbcdt), None, torch.empty_like(out_weight)]
        grads += [torch.empty_like(w) for w in weights]
        return tuple(g if ctx.needs_input_grad[i] else None for i, g in enumerate(grads))


def _kernel_mamba(self: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """A Mamba-2 mixer's forward as the fused kernel runs it in training (no cache)."""
    weights = [self.conv1d.weight, self.dt_bias, self.A_log, self.D, self.norm.weight]
    if self.conv1d.bias is not None:
        weights.append(self.conv1d.bias)
    return _Mamba2Kernel.apply(self.in_proj(hidden_states), self.intermediate_size, self.out_proj.weight, *weights)


def _is_mamba2_mixer(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("in_proj", "conv1d", "out_proj", "A_log", "dt_bias", "norm", "D"))


def make_traceable(model: Any) -> str | None:
    """Give `model`'s data-dependent routers the balanced forward, its mask checks their answer for a
    training step and (where the run has the kernels) its Mamba-2 mixers the kernels' memory; the
    routing note to record, None for a dense model."""
    routed: tuple[int, int] | None = None
    kernels = mamba_kernels()
    for module in model.modules():
        if hasattr(module, "_update_mamba_mask"):
            module._update_mamba_mask = types.MethodType(_no_mamba_mask, module)
        if kernels and _is_mamba2_mixer(module):
            module.forward = types.MethodType(_kernel_mamba, module)
        if _is_gating(module):
            module.forward = types.MethodType(_balanced_gating, module)
        elif _is_sparse_block(module):
            module.forward = types.MethodType(_balanced_sparse_block, module)
        else:
            continue
        routed = (int(module.num_experts), int(module.top_k))
    if routed is None:
        return None
    experts, top_k = routed
    return NOTE.format(experts=experts, top_k=top_k, ratio=experts / top_k)


def moe_shape(config: Any) -> tuple[int, int] | None:
    """(experts, top_k) of an MoE architecture's config, None for a dense one."""
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    return (int(experts), int(top_k)) if experts and top_k else None
