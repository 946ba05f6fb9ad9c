"""What the engine's stack does to a step's memory, by release: a table, a probe where it has no entry.

Three decisions come from the environment's libraries: whether trl's SFTTrainer adds its fused LM head,
whether it computes token accuracy from a copy of the full logits, and whether accelerate keeps FSDP2's
unsharded gradients between accumulated micro-steps (no_sync). The table holds each release ftbench
offers (every fms-hf-tuning lock and the trl engine's stack), read from the installed versions without
importing anything; tests/trainer/test_predict_stack.py checks it against the probes. A release the
table lacks is probed by reading its source, and the prediction says so; a probe that fails is a note
that names the guess, never a silent False.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

from ftbench.contracts.prediction import MAMBA_KERNELS_ENV

# The per-token outputs trl's SFTTrainer asks its fused LM head for (trl 1.16 `SFTTrainer.__init__`:
# log-probabilities for the loss, entropy and top-1 for its logged metrics).
SFT_FUSED_OUTPUTS = ("log_probs", "entropy", "is_top1")

# trl release -> (SFTTrainer adds a fused LM head, SFTTrainer.compute_loss takes argmax of the shifted logits).
TRL: dict[str, tuple[bool, bool]] = {
    "0.11.1": (False, False),
    "0.11.4": (False, False),
    "0.14.0": (False, False),
    "0.17.0": (False, True),
    "0.19.1": (False, True),
    "1.16.0": (True, False),
}
# accelerate release -> `Accelerator.no_sync` calls FSDP2's set_requires_gradient_sync(False).
ACCELERATE: dict[str, bool] = {"0.33.0": False, "1.0.1": False, "1.6.0": False, "1.11.0": True, "1.15.0": True}


@dataclass(frozen=True)
class Stack:
    """The three decisions, and a note for each one the table did not make."""

    fused_lm_head: tuple[str, ...]
    logits_accuracy: bool
    fsdp2_no_sync: bool
    notes: tuple[str, ...] = ()


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_fused_lm_head() -> bool:
    from trl.trainer import sft_trainer

    return hasattr(sft_trainer, "add_fused_lm_head")


def probe_logits_accuracy() -> bool:
    """trl 0.1x: `shift_logits.argmax` in `SFTTrainer.compute_loss`; trl 1.x takes it from its fused LM head."""
    from trl import SFTTrainer

    compute_loss = getattr(SFTTrainer, "compute_loss", None)
    source = inspect.getsource(compute_loss) if compute_loss is not None else ""
    return "shift_logits" in source and "argmax" in source


def probe_fsdp2_no_sync() -> bool:
    """accelerate 1.11 on: `Accelerator.no_sync` calls `set_requires_gradient_sync(False)`, so each parameter's
    whole unsharded gradient stays until the last micro-step; 1.6 reduces every micro-step."""
    from accelerate import Accelerator

    return "set_requires_gradient_sync" in inspect.getsource(Accelerator.no_sync)


def _decide(what: str, package: str, known: bool | None, probe: Callable[[], bool], notes: list[str]) -> bool:
    """The table's answer, else the probe's (noted), else False (noted as a guess)."""
    if known is not None:
        return known
    version = installed(package)
    try:
        answer = probe()
    except (ImportError, OSError, TypeError, AttributeError) as exc:  # no package, no source: the note says so
        notes.append(
            f"estimate: could not tell {what} ({package} {version}: {type(exc).__name__}: {exc}); assumed not, "
            "so the peak may be low by that term"
        )
        return False
    notes.append(f"{package} {version} is not in ftbench's release table: {what} read from its source ({answer})")
    return answer


def _column(row: tuple[bool, bool] | None, i: int) -> bool | None:
    return None if row is None else row[i]


@functools.cache
def stack() -> Stack:
    """This environment's answers (once per process: a batch and the predictor service ask for every plan)."""
    notes: list[str] = []
    trl = installed("trl")
    if trl is None:
        fused, accuracy = False, False  # no trl: transformers' loss, nothing beside it
    else:
        known = TRL.get(trl)
        fused = _decide("whether SFTTrainer fuses the LM head", "trl", _column(known, 0), probe_fused_lm_head, notes)
        accuracy = not fused and _decide(
            "whether SFTTrainer copies the logits for its token accuracy",
            "trl",
            _column(known, 1),
            probe_logits_accuracy,
            notes,
        )
    no_sync = _decide(
        "whether accelerate's no_sync keeps FSDP2's unsharded gradients",
        "accelerate",
        ACCELERATE.get(installed("accelerate") or ""),
        probe_fsdp2_no_sync,
        notes,
    )
    return Stack(SFT_FUSED_OUTPUTS if fused else (), accuracy, no_sync, tuple(notes))


def mamba_kernels() -> bool:
    """Whether Mamba-2 layers are traced as the fused kernels run them (contracts MAMBA_KERNELS_ENV)."""
    choice = os.environ.get(MAMBA_KERNELS_ENV, "auto").lower()
    if choice in ("true", "1"):
        return True
    if choice in ("false", "0"):
        return False
    return all(importlib.util.find_spec(p) is not None for p in ("mamba_ssm", "causal_conv1d"))
