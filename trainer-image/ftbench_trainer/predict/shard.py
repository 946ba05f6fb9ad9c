"""From the traced single-rank step to one rank of the sharded run: arithmetic on the traced split.

The trace runs the whole model on one (fake) device. Sharding divides what it shards by the
ranks that share it and adds what the sharding adds; each phase's peak is rescaled and the
highest rescaled phase is the prediction. Pure Python, no torch. (FSDP2 runs, trl's, are traced
sharded instead: predict.model.) The rules for each sharding (FSDP1, DeepSpeed ZeRO, DDP), master
weights, gradient accumulation, AdamW's foreach temporaries, fast MoE and offload are stated once,
in the design notes, which docs/measurements.md quotes.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/predict/shard.py".
"""

from __future__ import annotations

from dataclasses import dataclass

from ftbench_trainer.measure.split import Split


@dataclass(frozen=True)
class Sharding:
    kind: str  # none, ddp, FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, zero2, zero3
    ranks: int = 1  # ranks a shard is split across
    forward_prefetch: bool = False
    offload_parameters: bool = False
    offload_optimizer: bool = False
    master_factor: float = 1.0  # bytes of a trained parameter's state relative to the traced dtype
    fsdp1: bool = False  # FSDP1's arithmetic (the root unit stays gathered from forward to backward)
    flat_parameters: bool = False  # FSDP1 without use_orig_params: AdamW steps one flat parameter at a time
    expert_parallel: int = 0  # fastMoe's expert-parallel degree (0: the experts are FSDP's like the rest)
    no_sync: bool = False  # gradient accumulation: FSDP1 keeps unsharded gradients between micro-steps

    @property
    def label(self) -> str:
        return self.kind if self.ranks > 1 or self.kind in ("none", "ddp") else f"{self.kind} (1 rank)"


@dataclass(frozen=True)
class Sizes:
    """The traced model's sizes the arithmetic needs (bytes in the traced dtype)."""

    parameters: int  # every parameter and buffer
    trainable: int  # the parameters that train
    layer: int  # the largest decoder layer: what FSDP gathers at a time
    root: int  # what is outside the decoder layers (embeddings, final norm, LM head)
    root_trainable: int  # the part of it that trains
    experts: int = 0  # MoE experts' parameters
    experts_trainable: int = 0
    layer_experts: int = 0  # the experts of the largest layer


FULL = ("FULL_SHARD", "HYBRID_SHARD", "zero3")
GRADS_AND_STATE = ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2", "zero2")


def _div(n: float, ranks: int) -> int:
    return int(-(-n // ranks))


def shard_phase(split: Split, phase: str, s: Sharding, sizes: Sizes, *, gradient_bytes: int) -> Split:
    """One phase's peak split as one rank of `s` holds it."""
    p, g, o, x = split.parameters, split.gradients, split.optimizer, split.other
    n, m = s.ranks, s.master_factor
    if s.kind == "ddp":
        return Split(p, g + gradient_bytes, o, x)
    if s.kind in GRADS_AND_STATE:
        return Split(p, _div(g * m, n), 0 if s.offload_optimizer else _div(o * m, n), x)
    if s.kind not in FULL:
        return split
    trained = sizes.trainable
    computing = phase != "optimizer"
    # fastMoe: the experts are held per expert-parallel rank (1/ep of them, load dtype), outside FSDP.
    ep = s.expert_parallel
    experts, experts_trained = (sizes.experts, sizes.experts_trainable) if ep else (0, 0)
    layer = sizes.layer - (sizes.layer_experts if ep else 0)
    share = experts_trained / trained if trained else 0.0  # the experts' part of gradients and state
    root, root_grad = (sizes.root, sizes.root_trainable) if s.fsdp1 else (0, 0)
    # Backward's loss, before any decoder layer's gradient (at most the LM head's, the root's): only the
    # prefetched last layer is gathered beside the root, and no layer holds an unsharded gradient.
    loss = phase == "backward" and g <= sizes.root_trainable
    layers = (1 if loss else 2) if phase == "backward" else (2 if s.forward_prefetch else 1)
    gathered = (layer * layers + root) if computing else 0
    # Each unit's gradient before its reduce-scatter: the layer's, and FSDP1's root's through backward.
    unsharded = (0 if loss else min(layer, g)) + root_grad if phase == "backward" and g else 0
    params = _div(p - experts + (trained - experts_trained) * (m - 1), n) + (_div(experts, ep) if ep else 0)
    grads = _div(g * (1 - share) * m, n) + (_div(g * share, ep) if ep else 0)
    state = o
    if phase == "optimizer" and s.flat_parameters and o > 2 * trained:
        # The traced foreach temporary (one trained-parameter-sized buffer) becomes one flat parameter's.
        state = o - trained + layer
    state = _div(state * (1 - share) * m, n) + (_div(state * share, ep) if ep else 0)
    if s.offload_parameters:
        params = grads = 0
    if s.offload_optimizer:
        state = 0
    return Split(params + gathered, grads + unsharded, state, x)


def unsharded_gradients(s: Sharding, sizes: Sizes) -> int:
    """Bytes of the unsharded gradients FSDP1's `no_sync` keeps between micro-steps: every trained parameter
    FSDP manages (fastMoe's experts are not FSDP's), in the traced dtype; 0 where nothing is sharded."""
    if not (s.fsdp1 and s.no_sync and s.ranks > 1 and s.kind in FULL + GRADS_AND_STATE):
        return 0
    return sizes.trainable - (sizes.experts_trainable if s.expert_parallel else 0)


def shard(phases: dict[str, Split], s: Sharding, sizes: Sizes) -> dict[str, Split]:
    gradient_bytes = max((sp.gradients for sp in phases.values()), default=0)
    return {name: shard_phase(sp, name, s, sizes, gradient_bytes=gradient_bytes) for name, sp in phases.items()}
