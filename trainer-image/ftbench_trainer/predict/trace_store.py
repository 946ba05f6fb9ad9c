"""Traces kept on disk between processes, keyed by everything that decides them.

A trace is a function of the architecture's config, the step's shape, the FSDP shape, the engine's stack
(torch, transformers, peft, trl, accelerate, the Mamba kernels' choice) and ftbench's own tracing code; the
key hashes all of them, so a change to any one is a miss, never a stale answer. A hit is read without
importing torch or transformers: a repeated `ftbench predict` answers in about a second instead of tracing
again (docs/benchmarks.md, "Predict latency"). `FTBENCH_TRACE_CACHE` names the folder, or `off`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ftbench.contracts.env import FTBENCH_TRACE_CACHE, cache_root
from ftbench.contracts.prediction import MAMBA_KERNELS_ENV
from ftbench_trainer.measure.split import Split
from ftbench_trainer.predict.stack import installed
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace

FORMAT = 1
STACK = ("torch", "transformers", "peft", "trl", "accelerate", "mamba_ssm", "causal_conv1d")
# ftbench's code a trace runs through: any change to these files is a new key.
log = logging.getLogger(__name__)
CODE = ("predict/depth.py", "predict/step.py", "predict/trace.py", "predict/traceable.py", "measure/storage.py")


def folder() -> Path | None:
    """Where traces are kept (None: not kept)."""
    choice = os.environ.get(FTBENCH_TRACE_CACHE, "")
    if choice.lower() == "off":
        return None
    return Path(choice) if choice else cache_root() / "traces"


@functools.cache
def code_digest() -> str:
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for name in CODE:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes())
    return digest.hexdigest()


def key(architecture: str, shape: StepShape, fsdp: FsdpShape | None) -> str:
    """The trace's name: `architecture` is the config's source text (the catalog's fields or config.json)."""
    parts = [
        FORMAT,
        architecture,
        repr(shape),
        repr(fsdp),
        [installed(p) for p in STACK],
        os.environ.get(MAMBA_KERNELS_ENV, "auto"),
        code_digest(),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def _wire(trace: Trace) -> dict[str, Any]:
    return dataclasses.asdict(trace)


def _trace(data: dict[str, Any]) -> Trace:
    splits = {name: {phase: Split(**s) for phase, s in data[name].items()} for name in ("phases", "ends")}
    return Trace(**{**data, **splits})


def load(name: str) -> Trace | None:
    where = folder()
    path = where / f"{name}.json" if where else None
    if path is None or not path.is_file():
        return None
    try:
        return _trace(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as exc:  # a torn or foreign file: trace again, overwrite it
        log.warning("trace %s not read (traced again): %s", path, exc)
        return None


def save(name: str, trace: Trace) -> None:
    """Keep `trace` (atomically: a reader never sees half a file; a folder that cannot be written keeps nothing)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=where, suffix=".tmp", delete=False) as out:
            json.dump(_wire(trace), out)
        os.replace(out.name, where / f"{name}.json")
    except OSError as exc:
        log.warning("trace not kept in %s: %s", where, exc)
