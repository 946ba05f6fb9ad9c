"""Trace training steps of the real architecture with fake tensors: the measured half of a prediction.

The model is built from its config on the meta device (no weights), given LoRA or prompt tuning as
the engine would, moved to *fake* CPU tensors, and run through the steps the Trainer runs: forward
with labels, backward, gradient clipping, AdamW, zero_grad. Nothing is computed; shapes, dtypes
and allocations are. `StorageTracker` counts the storages as they come and go. Why fake CPU,
AdamW's foreach, FSDP traced, the engine's own loss and the steady state (each moved the answer
by 20-80 % when wrong) is in the design notes.

Design notes: docs/design-notes.md, "trainer-image/ftbench_trainer/predict/trace.py".
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import torch

from ftbench_trainer.measure.storage import StorageTracker, local_tensor
from ftbench_trainer.predict.fused_head import gpu_path
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace
from ftbench_trainer.predict.step_family import Holders, Recording, splits
from ftbench_trainer.predict.traceable import make_traceable


def build_model(config: Any, shape: StepShape, device: str = "meta") -> Any:
    """The bare architecture in the step's dtype: on the meta device (no memory) for the
    prediction, on "cpu" to train it for real. `add_adapter` adds LoRA or prompt tuning."""
    config._attn_implementation = shape.attention
    with torch.device(device):
        return model_from_config(config, getattr(torch, shape.dtype))


def model_from_config(config: Any, dtype: torch.dtype) -> Any:
    """`AutoModelForCausalLM.from_config` in `dtype` under every transformers an engine runs: 5.x
    (trl) calls the argument dtype, 4.x (fms-hf-tuning's environments) torch_dtype."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config, dtype=dtype)
    except TypeError:
        return AutoModelForCausalLM.from_config(config, torch_dtype=dtype)


def add_adapter(model: Any, shape: StepShape) -> Any:
    """trl's fused LM head where the engine's SFTTrainer adds one (before PEFT, as it does), then the
    PEFT adapter the engine adds (on the tensors the model already has: fake or real)."""
    if shape.fused_lm_head and not getattr(model, "_ftbench_fused_lm_head", False):
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model, outputs=shape.fused_lm_head)
        model._ftbench_fused_lm_head = True
    if shape.method == "pt":
        return PromptTuned(model, shape.pt_virtual_tokens)
    return _peft(model, shape) if shape.method in ("lora", "gptq-lora") else model


class PromptTuned(torch.nn.Module):
    """Prompt tuning as peft runs it: trained virtual-token embeddings prepended to the input
    embeddings (labels ignored there), the model frozen. Written out because peft's own setup moves
    its prompt encoder between devices, which fake tensors refuse."""

    def __init__(self, model: Any, tokens: int) -> None:
        super().__init__()
        self.model = model
        for p in model.parameters():
            p.requires_grad_(False)
        embed = model.get_input_embeddings()
        self.prompt = torch.nn.Parameter(torch.zeros(tokens, embed.embedding_dim, dtype=embed.weight.dtype))
        self._no_split_modules = getattr(model, "_no_split_modules", None)

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        self.model.gradient_checkpointing_enable(**kwargs)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, **kwargs: Any) -> Any:
        batch, tokens = input_ids.shape[0], self.prompt.shape[0]
        embeds = self.model.get_input_embeddings()(input_ids)
        embeds = torch.cat([self.prompt.unsqueeze(0).expand(batch, -1, -1), embeds], dim=1)
        ignored = torch.full((batch, tokens), -100, dtype=labels.dtype)
        return self.model(inputs_embeds=embeds, labels=torch.cat([ignored, labels], dim=1), **kwargs)


def _peft(model: Any, shape: StepShape) -> Any:
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        r=shape.lora_r,
        lora_alpha=shape.lora_alpha,
        target_modules=list(shape.lora_targets) if shape.lora_targets else None,
        lora_dropout=shape.lora_dropout,
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )
    return get_peft_model(model, config)


def trained_by_lora(config: Any, shape: StepShape) -> list[bool]:
    """For each decoder layer of `config`: whether LoRA (the shape's target modules, matched as peft matches a
    list: the module's name or its last part) trains something in it. Built on the meta device: no memory."""
    targets = set(shape.lora_targets or ())
    model = build_model(config, shape)
    return [
        any(name in targets or name.rsplit(".", 1)[-1] in targets for name, _ in layer.named_modules())
        for layer in layers_of(model)
    ]


def layers_of(model: Any) -> list[Any]:
    names = set(getattr(model, "_no_split_modules", None) or [])
    base = getattr(model, "base_model", model)
    names |= set(getattr(getattr(base, "model", base), "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def _optimizer(params: list[torch.Tensor], shape: StepShape) -> torch.optim.Optimizer:
    # Each engine runs transformers' adamw_torch: torch's AdamW with its device default.
    return torch.optim.AdamW(params, lr=1e-5, foreach=shape.device == "cuda")


class ShardOptimizer:
    """AdamW stepped on the local shards of FSDP2's DTensor parameters and gradients.

    DTensor runs an elementwise op on its shards and nothing else (every parameter, gradient and state tensor is
    sharded alike), so the shards see the same allocations; but it works out each foreach op's sharding anew, and
    that work grows with the square of the parameter count: 40-60 % of tracing an FSDP2 step of a 40-layer
    hybrid. tests/trainer/test_trace_shards.py holds a step traced so equal to one with AdamW on the DTensors.
    """

    def __init__(self, params: list[torch.nn.Parameter], shape: StepShape) -> None:
        self.params = params
        self.shards = [local_tensor(p) for p in params]
        self.optimizer = _optimizer(self.shards, shape)
        self.state = self.optimizer.state

    def step(self) -> None:
        for param, shard in zip(self.params, self.shards, strict=True):
            shard.grad = None if param.grad is None else local_tensor(param.grad)
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for param in self.params:
            param.grad = None


@contextlib.contextmanager
def _autocast(shape: StepShape) -> Iterator[None]:
    if shape.autocast is None:
        yield
        return
    with torch.autocast("cpu", dtype=getattr(torch, shape.autocast)):
        yield


def _tail_from_backward_of(tracker: StorageTracker) -> Any:
    """A forward hook for each decoder layer: backward's tail starts again as the gradient of its output arrives
    (`Ledger.enter_tail`), so its last start is the lowest layer backward reaches (the first, or under LoRA the
    first that trains). A hook on a tensor allocates nothing; the recomputed output under checkpointing is
    outside the loss's graph, so only the traced output's gradient starts it."""

    def hook(module: Any, args: Any, output: Any) -> None:
        first = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(first, torch.Tensor) and first.requires_grad:
            first.register_hook(lambda grad: tracker.enter_tail())

    return hook


def _loss(model: Any, ids: torch.Tensor, shape: StepShape) -> torch.Tensor:
    """The training loss as the engine's SFTTrainer computes it, with what it computes beside it."""
    if shape.fused_lm_head:
        return model(input_ids=ids, labels=ids, fused_lm_head=True).loss
    outputs = model(input_ids=ids, labels=ids)
    if shape.logits_accuracy:  # trl 0.1x SFTTrainer.compute_loss: mean_token_accuracy from the logits
        shifted = outputs.logits[..., :-1, :].contiguous()
        labels = torch.zeros(shifted.shape[:-1], dtype=torch.long)
        mask = labels != -100
        ((shifted.argmax(dim=-1) == labels) & mask).sum()
        mask.sum()
        del shifted, labels, mask
    return outputs.loss


def run_steps(model: Any, shape: StepShape, tracker: StorageTracker, *, make_batch: Any) -> Trace:
    """One steady-state training step under the tracker; `model` holds fake or real tensors alike."""
    return _run_steps(model, shape, tracker, make_batch=make_batch)[0]


def _run_steps(model: Any, shape: StepShape, tracker: StorageTracker, *, make_batch: Any) -> tuple[Trace, Holders]:
    """`run_steps`, and which storages held parameters, gradients and optimizer state.

    The optimizer's state is made first by a step on zero gradients (what the first real step
    leaves behind, at the cost of no forward or backward), so the traced step runs as every step
    after the first: with the state live through forward and backward."""
    started = time.perf_counter()
    params = [p for p in model.parameters() if p.requires_grad]
    all_params = list(model.parameters())
    with tracker:
        tracker.add_all(all_params)
        tracker.add_all(model.buffers())
        param_serials = tracker.serials([*all_params, *model.buffers()])
        if shape.checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        layers = layers_of(model)
        for layer in layers:
            layer.register_forward_hook(_tail_from_backward_of(tracker))
        optimizer = ShardOptimizer(params, shape)
        tracker.enter_phase("optimizer")
        for p in params:
            p.grad = torch.zeros_like(p)
        grad_serials = tracker.serials(p.grad for p in params)
        optimizer.step()
        optimizer_serials = tracker.serials(t for s in optimizer.state.values() for t in s.values())
        optimizer.zero_grad()
        micro_steps = min(shape.gradient_accumulation, 2)
        for micro in range(micro_steps):
            if shape.no_sync and hasattr(model, "set_requires_gradient_sync"):
                # accelerate's no_sync on FSDP2: whole unsharded gradients until the accumulation's last micro-step
                model.set_requires_gradient_sync(micro == micro_steps - 1)
            tracker.enter_phase("forward")
            ids = make_batch()
            with _autocast(shape):
                loss = _loss(model, ids, shape)
            tracker.enter_phase("backward")
            loss.backward()
            del loss, ids
            grad_serials |= tracker.serials(p.grad for p in params)
            grad_serials |= tracker.serials(_unsharded_gradients(model))
        tracker.enter_phase("optimizer")
        if shape.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, shape.max_grad_norm, foreach=shape.device == "cuda")
        optimizer.step()
        optimizer_serials |= tracker.serials(t for s in optimizer.state.values() for t in s.values())
        optimizer.zero_grad()
        tracker.finish()
        # FSDP2 keeps each gathered parameter's storage (resized to 0 between uses): count it as a parameter.
        param_serials |= tracker.serials(_gathered_parameters(model))

    holders = Holders(frozenset(param_serials), frozenset(grad_serials), frozenset(optimizer_serials))
    phases, ends, tails = splits(tracker, holders)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    root = [p for p in all_params if id(p) not in in_layers]
    experts = {id(p): p for p in experts_of(model)}.values()
    largest = max(layers, key=lambda m: _bytes(m.parameters()), default=None)
    trace = Trace(
        phases=phases,
        ends=ends,
        tails=tails,
        parameters=sum(p.numel() for p in all_params),
        trainable=sum(p.numel() for p in params),
        parameter_bytes=_bytes(all_params),
        trainable_bytes=_bytes(params),
        root_bytes=_bytes(root),
        root_trainable_bytes=_bytes(p for p in root if p.requires_grad),
        expert_bytes=_bytes(experts),
        expert_trainable_bytes=_bytes(p for p in experts if p.requires_grad),
        layer_expert_bytes=_bytes(experts_of(largest)) if largest is not None else 0,
        quantizable_weights=sum(
            m.weight.numel()
            for layer in layers
            for name, m in layer.named_modules()
            if isinstance(m, torch.nn.Linear) and "lora_" not in name
        ),
        largest_layer_bytes=max((_bytes(m.parameters()) for m in layers), default=0),
        seconds=time.perf_counter() - started,
    )
    return trace, holders


def experts_of(model: Any) -> list[torch.nn.Parameter]:
    """The MoE experts' parameters: those of an experts module (GraniteMoe's ParallelExperts, transformers
    5's fused Experts) or of a module list called experts (Mixtral's in transformers 4.x)."""
    seen: dict[int, torch.nn.Parameter] = {}
    for name, module in model.named_modules():
        if type(module).__name__.endswith("Experts") or name.rsplit(".", 1)[-1] == "experts":
            seen.update((id(p), p) for p in module.parameters())
    return list(seen.values())


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def retie(model: Any) -> Any:
    """`model` with its tied weights tied again: `to_empty` gives every module its own new tensor, so
    an LM head tied to the embeddings (tie_word_embeddings) would count, train and shard twice."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base.config, "tie_word_embeddings", False):
        return model
    embeddings, head = base.get_input_embeddings(), base.get_output_embeddings()
    if embeddings is None or head is None:
        return model
    # A PEFT-wrapped layer's `weight` is a property of its base layer's.
    embeddings, head = getattr(embeddings, "base_layer", embeddings), getattr(head, "base_layer", head)
    if head.weight is not embeddings.weight:
        head.weight = embeddings.weight
    return model


def _fsdp_params(model: Any) -> list[Any]:
    """FSDP2's per-parameter records (`FSDPParam`) of every sharded module (empty without FSDP2)."""
    out: list[Any] = []
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = getattr(state(), "_fsdp_param_group", None) if callable(state) else None
        out.extend(getattr(group, "fsdp_params", None) or ())
    return out


def _gathered_parameters(model: Any) -> list[torch.Tensor]:
    """The unsharded parameters FSDP2 all-gathers into (empty without FSDP2)."""
    return [t for fsdp_param in _fsdp_params(model) for t in fsdp_param.all_gather_outputs]


def _unsharded_gradients(model: Any) -> list[torch.Tensor | None]:
    """The unsharded gradients FSDP2 keeps between micro-steps that do not sync (empty without FSDP2)."""
    out: list[torch.Tensor | None] = []
    for fsdp_param in _fsdp_params(model):
        out.append(getattr(fsdp_param, "unsharded_accumulated_grad", None))
        out.append(getattr(getattr(fsdp_param, "_unsharded_param", None), "grad", None))
    return out


@contextlib.contextmanager
def _fake_ranks(fsdp: FsdpShape | None) -> Iterator[Any]:
    """A fake process group of the run's ranks (collectives keep shapes, move nothing) and its CPU mesh."""
    if fsdp is None:
        yield None
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=fsdp.ranks)
    try:
        yield init_device_mesh("cpu", (fsdp.ranks,))
    finally:
        dist.destroy_process_group()


def shard_like_accelerate(model: Any, mesh: Any, *, reshard_after_forward: bool) -> Any:
    """FSDP2 as accelerate applies it: `fully_shard` on each decoder layer, then on the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in layers_of(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def trace_step(config: Any, shape: StepShape, fsdp: FsdpShape | None = None) -> Trace:
    """Trace a steady-state step of `config`'s architecture with fake CPU tensors (one rank of
    `fsdp`'s FSDP2 run when given)."""
    return recorded_step(config, shape, fsdp).trace


def recorded_step(config: Any, shape: StepShape, fsdp: FsdpShape | None = None) -> Recording:
    """`trace_step`, with the step's events (what `predict.step_family` replays at other batches)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    started = time.perf_counter()
    model = build_model(config, shape)
    # LoRA goes on on the meta device (peft moves its layers, which fake tensors' weak references refuse);
    # prompt tuning after the move (its prompt shares the embedding's module, which to_empty cannot swap).
    late = shape.method == "pt"
    if not late:
        model = add_adapter(model, shape)
    vocab = int(config.vocab_size)
    tracker = StorageTracker(record=True)
    with _fake_ranks(fsdp) as mesh, FakeTensorMode(allow_non_fake_inputs=True), gpu_path(shape, tracker):
        model = retie(model.to_empty(device="cpu"))
        if late:
            model = add_adapter(model, shape)
        routing = make_traceable(model)
        rows = tuple(sorted({int(p.shape[0]) for p in model.parameters() if p.dim()})) if fsdp is not None else ()
        if fsdp is not None:
            model = shard_like_accelerate(model, mesh, reshard_after_forward=fsdp.reshard_after_forward)
        trace, holders = _run_steps(
            model, shape, tracker, make_batch=lambda: torch.randint(0, vocab, (shape.batch, shape.seq))
        )
    trace = dataclasses.replace(trace, seconds=time.perf_counter() - started, routing=routing)
    return Recording(trace, shape.batch, fsdp.ranks if fsdp else None, tracker.log or [], holders, rows)
