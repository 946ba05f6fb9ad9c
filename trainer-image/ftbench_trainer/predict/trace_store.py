"""Traces kept on disk between processes, keyed by everything that decides them.

A trace is a function of the architecture's config, the step's shape, the FSDP shape, the engine's stack
(torch, transformers, peft, trl, accelerate, the Mamba kernels' choice) and ftbench's own tracing code; the
key hashes all of them, so a change to any one is a miss, never a stale answer. A hit is read without
importing torch or transformers: a repeated `ftbench predict` answers in about a second instead of tracing
again (docs/benchmarks.md, "Predict latency"). Beside each trace its step family (`predict.step_family`),
keyed the same way but for the batch, answers the same step at another per-device batch without a trace.
`FTBENCH_TRACE_CACHE` names the folder, or `off`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ftbench.contracts.env import FTBENCH_TRACE_CACHE, cache_root
from ftbench.contracts.prediction import MAMBA_KERNELS_ENV
from ftbench_trainer.measure.split import Split
from ftbench_trainer.predict.depth import ScaledFamily
from ftbench_trainer.predict.stack import installed
from ftbench_trainer.predict.step import FsdpShape, StepShape, Trace
from ftbench_trainer.predict.step_family import StepFamily, batch_span

FORMAT = 6
FAMILIES_KEPT = 16  # batch families kept in memory too (a sweep asks the same family for many points)
STACK = ("torch", "transformers", "peft", "trl", "accelerate", "mamba_ssm", "causal_conv1d")
# ftbench's code a trace runs through: any change to these files is a new key.
log = logging.getLogger(__name__)
T = TypeVar("T")
CODE = (
    "predict/step_family.py",
    "predict/rank_terms.py",
    "predict/depth.py",
    "predict/fused_head.py",
    "predict/step.py",
    "predict/trace.py",
    "predict/traceable.py",
    "measure/ledger.py",
    "measure/storage.py",
)


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


def key(architecture: str, shape: StepShape, fsdp: FsdpShape | None, kind: str = "trace") -> str:
    """The trace's name: `architecture` is the config's source text (the catalog's fields or config.json)."""
    parts = [
        FORMAT,
        kind,
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
    splits = {name: {phase: Split(**s) for phase, s in data[name].items()} for name in ("phases", "ends", "tails")}
    return Trace(**{**data, **splits})


def family_key(architecture: str, shape: StepShape, fsdp: FsdpShape | None) -> str:
    """The name of the family of `shape`'s step: the trace's key, whatever its batch within the family's span
    (`step_family.batch_span`: one row is a step of its own) and FSDP2's ranks."""
    ranks = dataclasses.replace(fsdp, ranks=0) if fsdp is not None else None
    return key(architecture, dataclasses.replace(shape, batch=batch_span(shape)[0]), ranks, kind="step family")


def _read(name: str, decode: Callable[[Any], T]) -> T | None:
    where = folder()
    path = where / f"{name}.json" if where else None
    if path is None or not path.is_file():
        return None
    try:
        return decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as exc:  # a torn or foreign file: trace again, overwrite it
        log.warning("trace %s not read (traced again): %s", path, exc)
        return None


def _write(name: str, data: Any) -> None:
    """Keep `data` (atomically: a reader never sees half a file; a folder that cannot be written keeps nothing)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=where, suffix=".tmp", delete=False) as out:
            json.dump(data, out, separators=(",", ":"))
        os.replace(out.name, where / f"{name}.json")
    except OSError as exc:
        log.warning("trace not kept in %s: %s", where, exc)


def load(name: str) -> Trace | None:
    return _read(name, _trace)


def save(name: str, trace: Trace) -> None:
    _write(name, _wire(trace))


def _family(data: dict[str, Any]) -> StepFamily:
    return StepFamily.from_wire(data, _trace(data["trace"]))


def _scaled_family(data: dict[str, Any]) -> ScaledFamily:
    return ScaledFamily(_family(data["base"]), tuple((_family(f), int(n)) for f, n in data["increments"]))


_families: OrderedDict[str, ScaledFamily] = OrderedDict()


def load_family(name: str) -> ScaledFamily | None:
    if name in _families and folder() is not None:
        _families.move_to_end(name)
        return _families[name]
    found = _read(name, _scaled_family)
    if found is not None:
        _keep(name, found)
    return found


def save_family(name: str, found: ScaledFamily) -> None:
    _write(name, {"base": found.base.to_wire(), "increments": [[f.to_wire(), n] for f, n in found.increments]})
    _keep(name, found)


def _keep(name: str, found: ScaledFamily) -> None:
    _families[name] = found
    if len(_families) > FAMILIES_KEPT:
        _families.popitem(last=False)
