"""What FSDP really did: read from the wrapped model and the optimizer, never from the spec.

`fsdp_in_effect` walks the prepared model for FSDP2 modules (`fully_shard`: DTensor parameters,
one param group per wrapped module) or FSDP1 wrappers (`FullyShardedDataParallel`: flat
parameters) and reports version, strategy, wrapped classes, prefetch, offload and mixed precision
as the wrappers hold them. `ShardProbe` counts the bytes each rank holds: parameters between
steps, gradients when the optimizer steps (a step pre-hook on the first step) and the optimizer
state after it, local shards only. Under FULL_SHARD each rank then holds about 1/N of the
parameters; NO_SHARD holds all of them on every rank; DDP too. Activation checkpointing is read
from the transformers model inside the wrappers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ftbench.contracts.environment import FsdpInEffect


def local_tensor(t: Any) -> Any:
    """A DTensor's local shard; any other tensor as is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the local parts of `tensors`, each storage counted once (tied weights)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        local = local_tensor(t)
        if local is None or not hasattr(local, "numel") or local.numel() == 0:
            continue
        key = id(local) if local.device.type == "meta" else local.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += local.numel() * local.element_size()
    return total


def parameter_bytes(model: Any) -> int:
    return tensor_bytes(model.parameters())


def gradient_bytes(model: Any) -> int:
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: Any) -> int:
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps torch's
    state = getattr(inner, "state", {}) or {}
    return tensor_bytes(v for per_param in state.values() for v in per_param.values() if hasattr(v, "numel"))


def full_parameter_count_and_bytes(model: Any) -> tuple[int, int] | None:
    """(parameters, bytes) of the whole unsharded model from what the FSDP wrappers record
    (DTensor global shapes; FSDP1 flat parameters' original numels), None without FSDP."""
    fsdp1 = _fsdp1_modules(model)
    if fsdp1:
        count = nbytes = 0
        for m in fsdp1:
            handle = getattr(m, "_handle", None)
            flat = getattr(handle, "flat_param", None)
            if flat is None:
                continue
            numels = sum(int(n) for n in getattr(flat, "_numels", ()) or ())
            count += numels
            nbytes += numels * flat.element_size()
        return count, nbytes
    params = list(model.parameters())
    if not any(hasattr(p, "to_local") for p in params):
        return None
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def _fsdp2_classes() -> tuple[type, ...]:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch < 2.6
        return ()
    return (FSDPModule,)


def _fsdp1_modules(model: Any) -> list[Any]:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover
        return []
    return [m for m in model.modules() if isinstance(m, FullyShardedDataParallel)]


def _inner_class_name(module: Any, wrapper: type) -> str:
    """The class fully_shard subclassed (FSDPLlamaDecoderLayer -> LlamaDecoderLayer)."""
    for cls in type(module).__mro__[1:]:
        if not issubclass(cls, wrapper) and cls.__module__ != "builtins":
            return cls.__name__
    return type(module).__name__


def fsdp_in_effect(model: Any, state_dict_type: str = "") -> FsdpInEffect | None:
    """FSDP as the wrapped model holds it; None when the model is not FSDP."""
    fsdp2 = _fsdp2_classes()
    modules2 = [m for m in model.modules() if fsdp2 and isinstance(m, fsdp2)]
    if modules2:
        return _fsdp2_effect(model, modules2, fsdp2[0], state_dict_type)
    modules1 = _fsdp1_modules(model)
    if modules1:
        return _fsdp1_effect(modules1, state_dict_type)
    return None


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.") if dtype is not None else ""


def _fsdp2_effect(model: Any, modules: list[Any], wrapper: type, state_dict_type: str) -> FsdpInEffect:
    groups: list[tuple[Any, Any]] = []  # (module, param group)
    for m in modules:
        state = m._get_fsdp_state()
        for g in getattr(state, "_fsdp_param_groups", None) or [state._fsdp_param_group]:
            if g is not None:
                groups.append((m, g))
    # accelerate shards the root last (and keeps it gathered, as torch's heuristic does): the
    # layers say what the strategy is.
    layers = [(m, g) for m, g in groups if m is not model] or groups
    reshard = any(g.post_forward_mesh_info is not None for _, g in layers)
    group = layers[0][1]
    mp, offload = group.mp_policy, group.offload_policy
    from torch.distributed.fsdp import CPUOffloadPolicy

    layer_classes = dict.fromkeys(_inner_class_name(m, wrapper) for m, _ in layers if m is not model)
    return FsdpInEffect(
        version=2,
        sharding_strategy="FULL_SHARD" if reshard else "SHARD_GRAD_OP",
        reshard_after_forward=reshard,
        wrapped_modules=len(modules),
        wrapped_layer_classes=",".join(layer_classes),
        offload_params=isinstance(offload, CPUOffloadPolicy),
        offload_pin_memory=bool(getattr(offload, "pin_memory", False))
        if isinstance(offload, CPUOffloadPolicy)
        else False,
        param_dtype=_dtype_name(getattr(mp, "param_dtype", None)),
        reduce_dtype=_dtype_name(getattr(mp, "reduce_dtype", None)),
        state_dict_type=state_dict_type,
        sharded_parameters=sum(1 for p in model.parameters() if hasattr(p, "to_local")),
    )


def _fsdp1_effect(modules: list[Any], state_dict_type: str) -> FsdpInEffect:
    root = modules[0]
    strategy = getattr(root.sharding_strategy, "name", str(root.sharding_strategy))
    prefetch = getattr(root, "backward_prefetch", None)
    mp = getattr(root, "mixed_precision", None)
    cpu_offload = getattr(root, "cpu_offload", None)
    inner = dict.fromkeys(type(getattr(m, "_fsdp_wrapped_module", m)).__name__ for m in modules[1:] if m is not root)
    flat = [getattr(getattr(m, "_handle", None), "flat_param", None) for m in modules]
    return FsdpInEffect(
        version=1,
        sharding_strategy=strategy,
        reshard_after_forward=strategy in ("FULL_SHARD", "HYBRID_SHARD"),
        wrapped_modules=len(modules),
        wrapped_layer_classes=",".join(inner),
        forward_prefetch=bool(getattr(root, "forward_prefetch", False)),
        backward_prefetch=getattr(prefetch, "name", "") if prefetch is not None else "",
        offload_params=bool(getattr(cpu_offload, "offload_params", False)),
        param_dtype=_dtype_name(getattr(mp, "param_dtype", None)) if mp is not None else "",
        reduce_dtype=_dtype_name(getattr(mp, "reduce_dtype", None)) if mp is not None else "",
        state_dict_type=state_dict_type,
        sharded_parameters=sum(len(getattr(f, "_numels", ()) or ()) for f in flat if f is not None),
    )


def activation_checkpointing(model: Any) -> bool:
    """`is_gradient_checkpointing` of the first transformers model inside the wrappers."""
    for m in model.modules():
        flag = getattr(type(m), "is_gradient_checkpointing", None)
        if flag is not None:
            return bool(m.is_gradient_checkpointing)
    return False


class ShardProbe:
    """Counts this rank's parameter, gradient and optimizer-state bytes once, on the first step."""

    def __init__(self) -> None:
        self.parameter_bytes = 0
        self.gradient_bytes = 0
        self.optimizer_state_bytes = 0
        self._model: Any = None
        self._optimizer: Any = None
        self._hook: Any = None

    def attach(self, model: Any, optimizer: Any) -> None:
        self._model, self._optimizer = model, optimizer
        self.parameter_bytes = parameter_bytes(model)
        inner = getattr(optimizer, "optimizer", optimizer)
        register = getattr(inner, "register_step_pre_hook", None)
        if callable(register):
            self._hook = register(self._before_step)

    def _before_step(self, *_: Any) -> None:
        # The hook stays until after_step: removing it here would change the optimizer's hooks while
        # torch iterates over them, which fails as soon as another probe has a hook there too.
        if self._hook is not None:
            self.gradient_bytes = gradient_bytes(self._model)

    def after_step(self) -> None:
        """Called after each optimizer step; counts the optimizer state the first time it exists."""
        self.detach()
        if self._optimizer is not None and not self.optimizer_state_bytes:
            self.optimizer_state_bytes = optimizer_state_bytes(self._optimizer)

    def detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
