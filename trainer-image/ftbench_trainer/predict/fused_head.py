"""trl's fused LM head traced as a GPU runs it, not as the CPU the trace runs on does.

trl 1.16's `ChunkedLogProbFunction` projects the tokens through a fixed [4096, 32768] tile buffer and folds each
tile into per-token statistics. Where Triton runs (CUDA) the fold is a Triton kernel writing through pointers
into the tile and the statistics it is given, the gradient GEMMs accumulate in float32 by `addmm(out_dtype=...)`
into their accumulators, and only the positions with a label are scored (`hidden_states[mask]`). Elsewhere
(CPU, where the trace runs on fake tensors) the fold is torch ops on the whole tile: five to eight float32
temporaries of it (512 MiB each at full size) that a GPU never makes, made again for every tile.

`gpu_path` runs trl's own code on its GPU branch: `_use_triton` says yes, the Triton kernels stand as launches
that allocate nothing (what they do), `_addmm_fp32` accumulates in place where CUDA's does, and a boolean mask
over the labels selects the labelled positions (every one in a traced batch but prompt tuning's virtual tokens:
the trace asks a worst-case batch). So the head's storages are its buffers, the compacted tokens and their
gradients, whatever the tile count, and a step with it replays at other batches (predict.step_family).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ftbench_trainer.measure.ledger import Ledger
from ftbench_trainer.predict.step import StepShape
from ftbench_trainer.predict.step_family import FUSED_HEAD_TILE_TOKENS, labelled_tokens

# trl.kernels.chunked_logprob's names the GPU branch reads; tests/trainer/test_fused_head.py checks trl has them.
KERNEL_NAMES = ("_use_triton", "_forward_kernel", "_backward_kernel", "_addmm_fp32", "_MM_OUT_DTYPE")
VOCABULARY_TILE = "_CHUNKED_LOGPROB_CHUNK_SIZE"  # trl.trainer.utils': words per tile
TILE_TOKENS = "TOKEN_CHUNK_SIZE"  # its tokens per tile


class _Launch:
    """A Triton kernel's launch grid (`kernel[grid](...)`): the kernel reads and writes the buffers it is passed,
    allocating nothing."""

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: None


class _GpuBranchOps(TorchDispatchMode):
    """Two ops of the head's GPU branch a fake tensor cannot run as the GPU does: `x[mask]` for the label mask,
    whose true count a fake tensor cannot know (the labelled rows), and the tile buffer's making, which the ledger
    is told of (`Ledger.tile_next`: predict.step_family sizes it by its own rule)."""

    def __init__(self, shape: StepShape, ledger: Ledger, vocabulary_tile: int) -> None:
        super().__init__()
        self.positions, self.labelled = labelled_tokens(shape)
        self.tile = [min(self.labelled, FUSED_HEAD_TILE_TOKENS), vocabulary_tile]
        self.ledger = ledger

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten.index.Tensor:
            source, indices = args
            masks = [i for i in indices if i is not None and i.dtype == torch.bool]
            if len(indices) == 1 and masks and masks[0].numel() == self.positions:
                rest = source.shape[masks[0].dim() :]
                return torch.empty((self.labelled, *rest), dtype=source.dtype, device=source.device)
        out = func(*args, **kwargs)
        if func is torch.ops.aten.empty.memory_format and list(args[0]) == self.tile:
            self.ledger.tile_next()
        return out


@contextlib.contextmanager
def gpu_path(shape: StepShape, ledger: Ledger) -> Iterator[None]:
    """Within: trl's fused LM head takes its GPU branch (only for a step with the head, predicted for CUDA), and
    `ledger` is told which storages are its tile buffers."""
    if not shape.fused_lm_head or shape.device != "cuda":
        yield
        return
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    missing = [name for name in (*KERNEL_NAMES, TILE_TOKENS) if not hasattr(chunked_logprob, name)]
    missing += [name for name in (VOCABULARY_TILE,) if not hasattr(utils, name)]
    if missing:
        raise ValueError(f"trl's fused LM head has no {', '.join(missing)}: ftbench cannot trace its GPU branch")
    if getattr(chunked_logprob, TILE_TOKENS) != FUSED_HEAD_TILE_TOKENS:
        raise ValueError(
            f"trl's fused LM head tiles {getattr(chunked_logprob, TILE_TOKENS)} tokens, not the "
            f"{FUSED_HEAD_TILE_TOKENS} predict.step_family replays"
        )
    cpu_addmm = chunked_logprob._addmm_fp32

    def addmm_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        # CUDA: 16-bit inputs accumulate straight into `acc` (torch >= 2.8); else the same upcast copies as on CPU.
        if not (chunked_logprob._MM_OUT_DTYPE and a.dtype in (torch.float16, torch.bfloat16)):
            cpu_addmm(acc, a, b)

    patches: dict[tuple[Any, str], Any] = {
        (chunked_logprob, "_use_triton"): lambda device: True,
        (utils, "_use_triton"): lambda device: True,
        (chunked_logprob, "_forward_kernel"): _Launch(),
        (chunked_logprob, "_backward_kernel"): _Launch(),
        (chunked_logprob, "_addmm_fp32"): addmm_fp32,
        (chunked_logprob, "triton"): types.SimpleNamespace(cdiv=lambda a, b: -(-a // b)),
    }
    saved = {key: getattr(*key, None) for key in patches}
    for (module, name), value in patches.items():
        setattr(module, name, value)
    try:
        with _GpuBranchOps(shape, ledger, int(getattr(utils, VOCABULARY_TILE))):
            yield
    finally:
        for (module, name), value in saved.items():
            if value is None:
                delattr(module, name)
            else:
                setattr(module, name, value)
