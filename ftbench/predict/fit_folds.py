"""What the memory and throughput fits share: the folds that hold rows out of a fit, and the error bands of
the held-out rows per scope and model kind (ftbench.predict.constants' *_BANDS)."""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Final

from ftbench.catalog import Catalog
from ftbench.predict.calibrate import p90
from ftbench.predict.constants import Band
from ftbench.predict.fleet_accuracy import ANY_KIND, DENSE, MOE, SCOPES, kind, scope

FOLDS: Final = 5
Bands = dict[tuple[str, str], Band]


def fold_group(spec: dict[str, Any]) -> str:
    """What must stay on one side of a fold: every row equal in all parameters but the batch, the sequence length
    and the experiment, so repeats, the batch and sequence of one configuration and its full/LoRA pair move
    together."""
    return json.dumps({k: v for k, v in spec.items() if k not in ("batchSize", "modelMaxLength", "experiment")},
                      sort_keys=True)  # fmt: skip


def grouped_folds(specs: dict[int, dict[str, Any]], folds: int = FOLDS) -> dict[int, str]:
    """line -> fold: the groups (`fold_group`) sorted by a hash of their key and dealt in turn, so the folds hold
    as many groups each and do not follow the table's order."""
    keys = sorted({fold_group(s) for s in specs.values()}, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    fold_of = {k: f"fold {i % folds + 1}" for i, k in enumerate(keys)}
    return {line: fold_of[fold_group(spec)] for line, spec in specs.items()}


def models_left_out(specs: dict[int, dict[str, Any]]) -> dict[int, str]:
    return {line: spec["model"] for line, spec in specs.items()}


def p90_or_none(values: list[float]) -> float | None:
    return p90(values) if values else None


def error_bands(errors: Iterable[tuple[dict[str, Any], int, int, float]], catalog: Catalog, by_kind: bool) -> Bands:
    """(spec, world size, nodes, |error|) rows as bands: per scope (and model kind where `by_kind`) the rows and
    their median and 90th percentile error, rounded as the constants module states them."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for spec, world_size, nodes, error in errors:
        where = scope(world_size, nodes)
        groups[(where, ANY_KIND)].append(error)
        if by_kind:
            groups[(where, kind(catalog.models[spec["model"]].architecture) or ANY_KIND)].append(error)
    order = {k: i for i, k in enumerate((DENSE, MOE, ANY_KIND))}
    out = {}
    for key, values in sorted(groups.items(), key=lambda kv: (SCOPES.index(kv[0][0]), order[kv[0][1]])):
        out[key] = (len(values), round(statistics.median(values), 1), round(p90(values), 1))
    return out
