"""How packed samples are kept from attending to each other, read from the batches trained.

trl packs samples best-fit-decreasing into rows and flattens a batch into one padding-free
sequence without an attention mask, whose `position_ids` restart at 0 for each sample. What keeps
the samples apart is then the model's: flash attention's varlen kernels split at those positions,
and transformers (>= 4.53, `masking_utils.find_packed_sequence_indices`) builds each sample's own
causal mask from them for sdpa and eager when no cache is in use, as in training. Measured on the
tiny Llama (tests/trainer/test_packing.py): every packed sample's loss equals its loss alone; with
a cache present (inference) transformers skips that step and the samples attend to each other,
logits off by ~0.5, which is what ../shared/notes/ml-stack-on-cpu.md observed.

`isolation` names what a packed batch relies on (status.environment.packing):
- `flashVarlen`: position ids with flash_attention_2;
- `positionIds`: position ids with sdpa or eager, masked per sample by transformers;
- `none`: position ids where this transformers has no packed-sequence masking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FLASH_VARLEN = "flashVarlen"
POSITION_IDS = "positionIds"
NOT_ISOLATED = "none"


def transformers_masks_packed_sequences() -> bool:
    try:
        from transformers import masking_utils
    except ImportError:
        return False
    return hasattr(masking_utils, "find_packed_sequence_indices")


def isolation(batch: Mapping[str, Any], attention: str) -> str | None:
    """How this batch's packed samples are kept apart; None when it is not a packed batch
    (no position ids, or a padded batch with its 2D attention mask)."""
    if "position_ids" not in batch or "input_ids" not in batch or batch.get("attention_mask") is not None:
        return None
    if attention.startswith("flash_attention"):
        return FLASH_VARLEN
    return POSITION_IDS if transformers_masks_packed_sequences() else NOT_ISOLATED
