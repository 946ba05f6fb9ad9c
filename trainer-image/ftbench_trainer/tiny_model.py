"""A tiny, randomly initialised Llama-style causal LM and tokenizer, built locally (no hub).

Used by tests and CPU smoke runs of both trainer stacks (fms-hf-tuning on transformers 4.55 and
trl on transformers 5.x). Fixtures saved by one transformers major do not load in the other, so
build it with the transformers of the environment that will use it::

    python -m ftbench_trainer.tiny_model OUT_DIR

The tokenizer is a byte-level BPE (a few hundred tokens, specials ``<s> </s> <unk> <pad>``)
trained on the package's synthetic sentences. Its normalizer prepends a space so that
``"\\n### Response:"`` encodes Llama-like as ``[" ", "\\n", "###", " Response", ":"]``:
fms-hf-tuning drops the first two ids of the response template (meant to be the ``"\\n"``) and
looks for the rest (``### Response:``) in the tokenized rows, which it then finds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from ftbench.contracts import env as E

MARKER = ".ftbench-tiny-model.json"
TINY_MODEL_VERSION = 1
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>"]
RESPONSE_TEMPLATE = "\n### Response:"
DEFAULT_VOCAB_SIZE = 512
DEFAULT_MODEL_MAX_LENGTH = 4096
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['content'] is string %}{{ '### ' + message['role'] + ':\n' + message['content'] }}"
    "{% else %}{{ '### ' + message['role'] + ':\n' }}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '\n\n' }}{% endfor %}{% if add_generation_prompt %}{{ '### assistant:\n' }}{% endif %}"
)


def corpus_lines() -> list[str]:
    """The built-in training corpus: the package's synthetic sentences plus prompt-format rows."""
    text = resources.files("ftbench_trainer").joinpath("data/words.txt").read_text(encoding="utf-8")
    sentences = [s for s in text.splitlines() if s and not s.startswith("#")]
    lines = list(sentences)
    # Rows in the benchmark prompt format so "###", " Input", " Response" become single tokens.
    for i in range(0, min(len(sentences), 1200) - 1, 2):
        lines.append(f"### Input:\n{sentences[i]}\n\n### Response:{sentences[i + 1]}")
    return lines


def build_tokenizer(*, vocab_size: int = DEFAULT_VOCAB_SIZE, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH):
    """Train the byte-level BPE tokenizer and wrap it in a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # The prefix space comes from a normalizer (like Llama's "▁" prepend), not from ByteLevel's
    # add_prefix_space, which transformers 4.x resets to False when it wraps the tokenizer.
    tok.normalizer = normalizers.Prepend(" ")
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=model_max_length,
        padding_side="right",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _params(seed: int, model_max_length: int, vocab_size: int) -> dict:
    import transformers

    return {
        "version": TINY_MODEL_VERSION,
        # Files saved by transformers 5 do not load in 4.x (the fms env): rebuild across majors.
        "transformers_major": int(transformers.__version__.split(".")[0]),
        "seed": seed,
        "model_max_length": model_max_length,
        "vocab_size": vocab_size,
    }


def _is_built(path: Path, params: dict) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("params") == params and (path / "config.json").is_file()


def build_tiny_model(
    path: str | os.PathLike,
    *,
    seed: int = 0,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Path:
    """Build (or reuse) the tiny model + tokenizer in ``path``; returns ``path``.

    Idempotent: a directory whose marker records the same parameters is reused. The model is
    written into a temporary sibling directory and renamed into place, so concurrent builders
    never see a half-written model.
    """
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    params = _params(seed, model_max_length, vocab_size)
    if _is_built(path, params):
        return path

    tokenizer = build_tokenizer(vocab_size=vocab_size, model_max_length=model_max_length)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        max_position_embeddings=model_max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker = {"params": params, "transformers": transformers.__version__, "torch": torch.__version__}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp creates it private
        # safetensors writes its file 0600: a model on a shared volume is read by other users (the
        # trainer image runs as a non-root user, the model was put there by someone else).
        for file in tmp.iterdir():
            file.chmod(0o644)
        if path.exists():
            if _is_built(path, params):  # someone else finished first
                return path
            # stale or partial directory from other parameters: replace it
            shutil.rmtree(path, ignore_errors=True)
        try:
            os.rename(tmp, path)
        except OSError:
            if not _is_built(path, params):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def tiny_model_for_this_stack(path: str | os.PathLike) -> Path:
    """The tiny model at ``path`` when it is built for this transformers major or can be (re)built there; else
    one built under ``$HF_HOME`` (or the temporary directory): a cluster mounts the models volume read-only,
    and the model an admin seeded there with one transformers major does not load in the other's image."""
    import transformers

    path = Path(path)
    if _is_built(path, _params(0, DEFAULT_MODEL_MAX_LENGTH, DEFAULT_VOCAB_SIZE)):
        return path
    if os.access(path if path.exists() else path.parent, os.W_OK):
        return build_tiny_model(path)
    major = transformers.__version__.split(".")[0]
    elsewhere = Path(os.environ.get(E.HF_HOME) or tempfile.gettempdir()) / "ftbench-tiny-models"
    return build_tiny_model(elsewhere / f"{path.name}-transformers{major}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftbench_trainer.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-max-length", type=int, default=DEFAULT_MODEL_MAX_LENGTH)
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    args = parser.parse_args(argv)
    out = build_tiny_model(
        args.out_dir, seed=args.seed, model_max_length=args.model_max_length, vocab_size=args.vocab_size
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
