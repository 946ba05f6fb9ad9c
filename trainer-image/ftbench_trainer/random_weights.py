"""Random-initialised weights of a catalog architecture, for a GPU benchmark where the real weights
cannot be reached (a lent machine with no hub access and no model volume).

A training step's arithmetic, memory and communication do not depend on the weights' values, so
tokens/s, MFU and peak memory measured on these weights are the figures of the architecture; loss
curves are not. The tokenizer is ftbench's byte-level BPE (tiny_model), not the model's own, filled
with unused tokens to the architecture's vocabulary size (an engine that fits the embeddings to the
tokenizer, as fms-hf-tuning does, then keeps the architecture's). The token datasets (news-tokens-*)
are generated for whichever tokenizer the folder holds and truncated to modelMaxLength, so every
batch still holds batchSize x modelMaxLength tokens. A results table made on such weights says so
(bench/gpu/run.py --random-weights)::

    python -m ftbench_trainer.random_weights OUT_DIR --architecture '{"model_type": "llama", ...}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ftbench_trainer.tiny_model import build_tokenizer

MARKER = ".ftbench-random-weights.json"
LAYOUT = 2  # of the folder: 2 fills the tokenizer to the vocabulary (a folder of layout 1 is rebuilt)


def build_random_weights(
    path: Path, architecture: dict[str, Any], *, dtype: str = "bfloat16", device: str = "auto", seed: int = 0
) -> Path:
    """Save the architecture with random weights (in `dtype`, initialised on `device`; "auto" is the
    GPU where there is one, which initialises 7B parameters in seconds) and the byte-level tokenizer
    into `path`. Idempotent: a folder whose marker records the same architecture and dtype is reused."""
    import torch

    from ftbench_trainer.predict.model import architecture_config
    from ftbench_trainer.predict.trace import model_from_config

    params = {"architecture": architecture, "dtype": dtype, "seed": seed, "layout": LAYOUT}
    marker = path / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("params") == params:
        return path
    config = architecture_config(architecture)
    tokenizer = build_tokenizer(model_max_length=int(getattr(config, "max_position_embeddings", 4096)))
    # fms-hf-tuning resizes the embeddings to the tokenizer's length (tokenizer_and_embedding_resize): a
    # tokenizer shorter than the architecture's vocabulary would train another, smaller model. Unused
    # tokens fill it to the vocabulary's size; they never occur in the data.
    tokenizer.add_tokens([f"<ftbench_unused_{i}>" for i in range(len(tokenizer), int(config.vocab_size))])
    for name in ("bos", "eos", "pad"):
        setattr(config, f"{name}_token_id", getattr(tokenizer, f"{name}_token_id"))
    torch.manual_seed(seed)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = model_from_config(config, getattr(torch, dtype))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    portable_tokenizer_class(path)
    marker.write_text(json.dumps({"params": params, "parameters": model.num_parameters()}, indent=2) + "\n")
    return path


def portable_tokenizer_class(path: Path) -> None:
    """Name the tokenizer's class as transformers 4.x and 5.x both load it: 5.x saves its own name
    (TokenizersBackend), which 4.x (fms-hf-tuning's stacks) does not know, and reads 4.x's."""
    config = path / "tokenizer_config.json"
    data = json.loads(config.read_text())
    if data.get("tokenizer_class") != "PreTrainedTokenizerFast":
        config.write_text(json.dumps({**data, "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the model folder to write")
    parser.add_argument("--architecture", required=True, help="the catalog entry's architecture, as JSON")
    parser.add_argument("--dtype", default="bfloat16", help="torch dtype of the saved weights (default bfloat16)")
    parser.add_argument("--device", default="auto", help="where to initialise them (default: the GPU if any)")
    args = parser.parse_args(argv)
    build_random_weights(args.path, json.loads(args.architecture), dtype=args.dtype, device=args.device)
    print(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
