"""From the traced single-rank step to one rank of the sharded run: arithmetic on the traced split.

The trace runs the whole model on one (fake) device. Sharding divides what it shards by the
ranks that share it and adds what the sharding adds; each phase's peak is rescaled and the
highest rescaled phase is the prediction. Pure Python, no torch: the rules are stated here once
and docs/measurements.md quotes them.

- FULL_SHARD, HYBRID_SHARD (within a node), DeepSpeed ZeRO-3: parameters, gradients and optimizer
  state / N, plus the layers gathered at a time (forward: one, two with forward prefetch;
  backward: two, the layer and the one prefetched, plus the layer's unsharded gradient).
- SHARD_GRAD_OP, HYBRID_SHARD_ZERO2, DeepSpeed ZeRO-2: gradients and optimizer state / N.
- DDP: everything replicated, plus its gradient buckets (one more copy of the gradients).
- NO_SHARD: replicated.
- Offload (FSDP offloadParams, DeepSpeed offload): what is offloaded is not on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftbench_trainer.predict.tracker import Split


@dataclass(frozen=True)
class Sharding:
    kind: str  # none, ddp, FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, zero2, zero3
    ranks: int = 1  # ranks a shard is split across
    forward_prefetch: bool = False
    offload_parameters: bool = False
    offload_optimizer: bool = False

    @property
    def label(self) -> str:
        return self.kind if self.ranks > 1 or self.kind in ("none", "ddp") else f"{self.kind} (1 rank)"


FULL = ("FULL_SHARD", "HYBRID_SHARD", "zero3")
GRADS_AND_STATE = ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2", "zero2")


def _div(n: int, ranks: int) -> int:
    return -(-n // ranks)


def shard_phase(split: Split, phase: str, s: Sharding, *, layer_bytes: int, gradient_bytes: int) -> Split:
    """One phase's peak split as one rank of `s` holds it."""
    p, g, o, x = split.parameters, split.gradients, split.optimizer, split.other
    n = s.ranks
    if s.kind == "ddp":
        return Split(p, g + gradient_bytes, o, x)
    if s.kind in FULL:
        gathered = layer_bytes * (2 if phase == "backward" or s.forward_prefetch else 1)
        if phase == "optimizer":
            gathered = 0
        # One layer's gradient before its reduce-scatter; frozen layers (LoRA, prompt tuning) have none.
        unsharded_grad = min(layer_bytes, g) if phase == "backward" else 0
        p = 0 if s.offload_parameters else _div(p, n)
        return Split(p + gathered, _div(g, n) + unsharded_grad, 0 if s.offload_optimizer else _div(o, n), x)
    if s.kind in GRADS_AND_STATE:
        return Split(p, _div(g, n), 0 if s.offload_optimizer else _div(o, n), x)
    return split


def shard(phases: dict[str, Split], s: Sharding, *, layer_bytes: int) -> dict[str, Split]:
    gradient_bytes = max((sp.gradients for sp in phases.values()), default=0)
    return {
        name: shard_phase(sp, name, s, layer_bytes=layer_bytes, gradient_bytes=gradient_bytes)
        for name, sp in phases.items()
    }
