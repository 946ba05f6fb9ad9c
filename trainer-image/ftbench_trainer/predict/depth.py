"""Trace a model at reduced depth and scale by its layers: a prediction in seconds, not a minute.

Every decoder layer of one kind holds the same parameters, gradients and optimizer state, and keeps
the same activations for backward; the embeddings, the final norm, the LM head and the loss are
there once whatever the depth. So each phase's peak split is linear in the number of layers of
each kind: tracing three layers of every kind (the base) and the base plus one more layer of a kind
gives that kind's increment, and the model's own depth is the base plus its increments. A dense
model is traced twice (three layers, four layers); a hybrid such as granite-4.0-h (Mamba and attention
layers) once more per layer kind. Traces are cached by architecture and step shape, so a sweep's
points that share them (and the predictor service's repeated plans) trace nothing again.

tests/trainer/test_predict_depth.py holds the scaled trace against the full-depth trace.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ftbench_trainer.measure.split import Split
from ftbench_trainer.predict.rank_terms import ranks_to_record
from ftbench_trainer.predict.stack import mamba_kernels
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace
from ftbench_trainer.predict.step_family import (
    Recording,
    StepFamily,
    batch_span,
    batches_to_record,
    family,
    labelled_tokens,
    replayable,
)

# Config fields that list one entry per layer (granitemoehybrid's layer_types, older layers_block_type).
LAYER_LISTS = ("layer_types",)
CACHE_SIZE = 64  # recorded steps (each keeps its events: about a megabyte)
BASE_LAYERS = 3  # of each kind, in the base trace
_cache: OrderedDict[str, Recording] = OrderedDict()


def layer_kinds(config: Any) -> list[str]:
    """One entry per decoder layer: its kind ("decoder" for a model of one kind)."""
    depth = int(config.num_hidden_layers)
    for name in LAYER_LISTS:
        kinds = getattr(config, name, None)
        if isinstance(kinds, (list, tuple)) and len(kinds) == depth:
            return [str(k) for k in kinds]
    return ["decoder"] * depth


def with_layers(config: Any, kinds: Sequence[str]) -> Any:
    """A copy of `config` with these layers (kinds as `layer_kinds` names them)."""
    out = copy.deepcopy(config)
    out.num_hidden_layers = len(kinds)
    for name in LAYER_LISTS:
        if isinstance(getattr(config, name, None), (list, tuple)):
            setattr(out, name, list(kinds))
    return out


def _key(config: Any, shape: StepShape, fsdp: FsdpShape | None) -> str:
    return json.dumps([config.to_dict(), repr(shape), repr(fsdp)], sort_keys=True, default=str)


def cached_recording(config: Any, shape: StepShape, fsdp: FsdpShape | None) -> Recording:
    key = _key(config, shape, fsdp)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    from ftbench_trainer.predict.trace import recorded_step  # torch: only where a trace is made

    recording = _cache[key] = recorded_step(config, shape, fsdp)
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return recording


def cached_trace(config: Any, shape: StepShape, fsdp: FsdpShape | None) -> Trace:
    return cached_recording(config, shape, fsdp).trace


def _scale(base: Trace, increments: list[tuple[Trace, int]]) -> Trace:
    """base + sum(count x (trace - base)) over each kind's one-more-layer trace, for each phase's peak, its end
    and its tail's peak (backward's from its first layer on); a phase's scaled peak is the highest of them (a peak
    is a moment, and the moment that is highest at full depth need not be the one that was highest at the depth
    traced: a 40-layer hybrid's backward peaks in its first layer, with nearly every gradient made, while three
    layers peak at the loss)."""

    def lin(get: Any) -> int:
        return int(get(base) + sum(n * (get(t) - get(base)) for t, n in increments))

    def scaled(split_of: Any) -> Split:
        return Split(
            lin(lambda t: split_of(t).parameters),
            lin(lambda t: split_of(t).gradients),
            lin(lambda t: split_of(t).optimizer),
            lin(lambda t: split_of(t).other),
        )

    phases = {}
    traces = (base, *(t for t, _ in increments))
    for name in base.phases:
        candidates = [scaled(lambda t, p=name: t.phases[p])]
        if name in base.ends:
            candidates.append(scaled(lambda t, p=name: t.ends[p]))
        if all(name in t.tails for t in traces):
            candidates.append(scaled(lambda t, p=name: t.tails[p]))
        phases[name] = max(candidates, key=lambda s: s.total)
    return Trace(
        phases=phases,
        parameters=lin(lambda t: t.parameters),
        trainable=lin(lambda t: t.trainable),
        parameter_bytes=lin(lambda t: t.parameter_bytes),
        trainable_bytes=lin(lambda t: t.trainable_bytes),
        root_bytes=base.root_bytes,
        root_trainable_bytes=base.root_trainable_bytes,
        expert_bytes=lin(lambda t: t.expert_bytes),
        expert_trainable_bytes=lin(lambda t: t.expert_trainable_bytes),
        layer_expert_bytes=max(t.layer_expert_bytes for t in (base, *(t for t, _ in increments))),
        largest_layer_bytes=max(t.largest_layer_bytes for t in (base, *(t for t, _ in increments))),
        quantizable_weights=lin(lambda t: t.quantizable_weights),
        seconds=base.seconds + sum(t.seconds for t, _ in increments),
        routing=base.routing,
    )


def lowest_kind(config: Any, shape: StepShape) -> str:
    """The kind of the lowest layer backward reaches: the first layer, or under LoRA the first that LoRA trains
    (with none below it training, backward stops there)."""
    kinds = layer_kinds(config)
    order = list(dict.fromkeys(kinds))
    if len(order) == 1 or shape.method not in ("lora", "gptq-lora") or not shape.lora_targets:
        return kinds[0]
    from ftbench_trainer.predict.trace import trained_by_lora  # torch: only where a trace is made

    trained = trained_by_lora(with_layers(config, order), shape)
    return next((kind for kind, trains in zip(order, trained, strict=True) if trains), kinds[0])


def traced_depths(config: Any, shape: StepShape) -> tuple[Any, list[tuple[Any, int]]]:
    """What to trace: the base and each kind's one-more-layer config with its count of layers beyond the base;
    no increments where the model is traced whole."""
    kinds = layer_kinds(config)
    order = list(dict.fromkeys(kinds))  # each kind once, in the model's order
    if len(order) > 1 and not mamba_kernels():
        # Mamba on transformers' torch path: its backward's transients are the step's largest, so the lowest layer
        # backward reaches goes first: at full depth backward ends there with nearly every gradient made (the
        # tail that Trace.tails scales), and every layer above it is traversed. A base whose first layers
        # backward skips (Mamba layers under attention-only LoRA) missed a 10-layer hybrid's backward peak by 83 %.
        lowest = lowest_kind(config, shape)
        order = [lowest, *(k for k in order if k != lowest)]
    # Three layers of each kind: with one, that layer is also the last, and backward's transients overlap
    # differently than between any two layers of the real model (a one-layer base over-predicted a
    # 32-layer LoRA step under FSDP2 by 80 %, two by 6 %; from three on each layer adds the same).
    base_kinds = [k for k in order for _ in range(BASE_LAYERS)]
    # As shallow as the traces would be: trace it whole.
    if len(kinds) <= len(base_kinds) + 1:
        return config, []
    increments = []
    for kind in order:
        grown = list(base_kinds)
        grown.insert(grown.index(kind) + 1, kind)
        increments.append((with_layers(config, grown), kinds.count(kind) - BASE_LAYERS))
    return with_layers(config, base_kinds), increments


def trace_scaled(config: Any, shape: StepShape, fsdp: FsdpShape | None = None) -> Trace:
    """The step of `config`'s full depth, traced at one layer per kind plus one, and scaled."""
    base, increments = traced_depths(config, shape)
    if not increments:
        return cached_trace(base, shape, fsdp)
    return _scale(cached_trace(base, shape, fsdp), [(cached_trace(c, shape, fsdp), n) for c, n in increments])


@dataclass(frozen=True)
class ScaledFamily:
    """`trace_scaled` at other batches and rank counts: the family of each traced depth."""

    base: StepFamily
    increments: tuple[tuple[StepFamily, int], ...] = ()

    def answers(self, batch: int, ranks: int | None) -> bool:
        return all(f.answers(batch, ranks) for f in (self.base, *(f for f, _ in self.increments)))

    def at(self, batch: int, ranks: int | None = None) -> Trace:
        if not self.increments:
            return self.base.at(batch, ranks)
        return _scale(self.base.at(batch, ranks), [(f.at(batch, ranks), n) for f, n in self.increments])


def scaled_family(config: Any, shape: StepShape, fsdp: FsdpShape | None = None) -> ScaledFamily | None:
    """`trace_scaled`'s family, from each depth traced at the batches `batches_to_record` names and, under FSDP2, at
    the rank counts `rank_terms.ranks_to_record` names too (the asked step's traces, where among them, are
    `trace_scaled`'s: none is traced twice); None where a depth's recordings disagree or the step does not replay
    (`replayable`). One row per device is a step of its own, and its family one of rank counts only (FSDP2): where
    GPUs double, the per-device batch halves to it."""
    if not replayable(shape, sharded=fsdp is not None):
        return None
    base, increments = traced_depths(config, shape)
    families = []
    for depth in (base, *(c for c, _ in increments)):
        moe = cached_trace(depth, shape, fsdp).expert_bytes > 0
        batches = batches_to_record(shape, moe=moe)
        recordings = [cached_recording(depth, dataclasses.replace(shape, batch=b), fsdp) for b in batches]
        others = []
        if fsdp is not None:
            first = dataclasses.replace(shape, batch=batches[0])
            for ranks in ranks_to_record(fsdp.ranks, recordings[0].rows):
                others.append(cached_recording(depth, first, dataclasses.replace(fsdp, ranks=ranks)))
        per_row = labelled_tokens(dataclasses.replace(shape, batch=1))[1] if shape.fused_lm_head else 0
        found = family(recordings, others, batch_span(shape), per_row)
        if found is None:
            return None
        families.append(found)
    return ScaledFamily(families[0], tuple(zip(families[1:], (n for _, n in increments), strict=True)))
