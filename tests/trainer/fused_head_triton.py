"""A training step's events inside trl's fused LM head on its GPU branch, twice: on real CPU tensors with trl's own
Triton kernels (run by Triton's interpreter: TRITON_INTERPRET=1 before trl is imported) and traced on fake tensors
with predict.fused_head's stand-ins. Prints both as JSON; tests/trainer/test_fused_head.py compares them.

Only the head's events are compared (from the final norm's output to its gradient): elsewhere transformers makes a
few small tensors on real data that it does not on fake (its mask checks), which is not what this holds. float32,
where the GPU's gradient accumulation (`_addmm_fp32`) runs the same ops as the CPU's."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from typing import Any

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import _disable_current_modes  # noqa: E402
from trl.kernels import chunked_logprob  # noqa: E402
from trl.trainer import utils  # noqa: E402

from ftbench_trainer.measure.ledger import FREE, NEW, PHASE, RESIZE, TILE  # noqa: E402
from ftbench_trainer.measure.storage import StorageTracker  # noqa: E402
from ftbench_trainer.predict import fused_head  # noqa: E402
from ftbench_trainer.predict.fused_head import gpu_path  # noqa: E402
from ftbench_trainer.predict.model import architecture_config  # noqa: E402
from ftbench_trainer.predict.stack import SFT_FUSED_OUTPUTS  # noqa: E402
from ftbench_trainer.predict.step import StepShape  # noqa: E402
from ftbench_trainer.predict.trace import add_adapter, build_model, retie, run_steps  # noqa: E402

ARCHITECTURE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False}  # fmt: skip
HEAD, BELOW = "head", "below the head"


class Untracked:
    """A Triton kernel whose launches run outside the tracker (and every other dispatch mode), leaving no reference
    to its arguments behind."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            with _disable_current_modes():
                self.kernel[grid](*args, **kwargs)
            gc.collect()  # the interpreter's frames hold the arguments in reference cycles: not a GPU's doing

        return launch


def mark_the_head(model: Any, tracker: StorageTracker) -> None:
    norm = next(m for name, m in model.named_modules() if name.endswith("model.norm"))

    def hook(module: Any, args: Any, output: torch.Tensor) -> None:
        tracker.enter_phase(HEAD)
        output.register_hook(lambda grad: tracker.enter_phase(BELOW))

    norm.register_forward_hook(hook)


def head_events(log: list[Any]) -> tuple[list[list[Any]], list[int]]:
    """The events from each HEAD mark to the next mark, storages numbered from the first made there (earlier ones:
    -1), so the same head gives the same list whatever came before it; and which of them made tile buffers (the
    trace's TILE marks)."""
    out: list[list[Any]] = []
    tiles: list[int] = []
    local: dict[int, int] = {}
    serial, inside = 0, False
    for event in log:
        code = event[0]
        if code == NEW:
            if inside:
                local[serial] = len(local)
                out.append([NEW, event[1]])
            serial += 1
        elif code == PHASE:
            inside = event[1] == HEAD or (inside and event[1] == "backward")
            out.append(list(event)) if inside else None
        elif code == TILE:
            tiles.append(len(out) - 1) if inside else None
        elif inside and code in (FREE, RESIZE):
            out.append([code, local.get(int(event[1]), -1), *event[2:]])
    return out, tiles


def step_log(shape: StepShape, *, fake: bool) -> tuple[list[list[Any]], list[int]]:
    config = architecture_config(ARCHITECTURE)
    torch.manual_seed(0)
    late = shape.method == "pt"
    model = build_model(config, shape, device="meta" if fake else "cpu")
    model = model if late else add_adapter(model, shape)
    tracker = StorageTracker(record=True)
    traced = (FakeTensorMode(allow_non_fake_inputs=True), gpu_path(shape, tracker)) if fake else ()
    with contextlib.ExitStack() as stack:
        for context in traced:
            stack.enter_context(context)
        model = retie(model.to_empty(device="cpu") if fake else model)
        model = add_adapter(model, shape) if late else model
        mark_the_head(model, tracker)
        vocab = ARCHITECTURE["vocab_size"]
        run_steps(model, shape, tracker, make_batch=lambda: torch.randint(0, vocab, (shape.batch, shape.seq)))
    return head_events(tracker.log or [])


def main(method: str, batch: int, seq: int, tile_tokens: int, vocab_chunk: int) -> None:
    # Smaller tiles than trl's (4096 tokens x 32768 words) give a tiny model several of each, a last one partial.
    chunked_logprob.TOKEN_CHUNK_SIZE = fused_head.FUSED_HEAD_TILE_TOKENS = tile_tokens
    utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab_chunk
    shape = StepShape(method=method, dtype="float32", autocast=None, attention="eager", checkpointing=False,  # type: ignore[arg-type]
                      batch=batch, seq=seq, lora_r=4, lora_alpha=16, lora_targets=("q_proj", "v_proj"),
                      pt_virtual_tokens=5, fused_lm_head=SFT_FUSED_OUTPUTS)  # fmt: skip
    traced, tiles = step_log(shape, fake=True)
    # The GPU branch on real CPU tensors: trl's Triton kernels, interpreted; nothing else stood in. The interpreter
    # runs a kernel with torch tensors of its own, which a GPU's compiled kernel does not have: a launch is not
    # tracked, as a GPU's allocator would not see one.
    chunked_logprob._use_triton = utils._use_triton = lambda device: True
    chunked_logprob._forward_kernel = Untracked(chunked_logprob._forward_kernel)
    chunked_logprob._backward_kernel = Untracked(chunked_logprob._backward_kernel)
    real, _ = step_log(shape, fake=False)
    json.dump({"real": real, "traced": traced, "tiles": [traced[i] for i in tiles]}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:6]))
