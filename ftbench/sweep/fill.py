"""A sweep whose points run on the fewest GPUs they are predicted to fit on (`ftbench predict SWEEP --fill-gpus`).

ado autoconf sizes one configuration; a sweep over batch sizes and sequence lengths needs a GPU count per
point. The filled sweep is a plain FineTuneSweep (what `kubectl apply` and `ftbench sweep` take): the same
template, and one `include` entry per point holding the point's own values with numberGpus and numberNodes
set to the fewest GPUs predicted to fit, or left as they were where no count tried fits (the sweep's
skipPredictedOom then decides) or the point is invalid (it stays a measurement of why). The matrix and
exclude are spent into those entries, so every point is written out once. Where a point comes down to one
GPU, the template's distributed settings (distributedBackend, fsdp*), refused on one process, move into the
entries of the points that keep several.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ftbench.api.shapes import is_distributed_setting
from ftbench.api.sweep import MAX_LIST_ENTRIES
from ftbench.sweep.points import SweepPoint


class TooManyPoints(ValueError):
    """The filled sweep would need more include entries than a FineTuneSweep holds."""


def filled_sweep(
    document: Mapping[str, Any], points: Sequence[SweepPoint], fewest: Mapping[int, tuple[int, int]]
) -> dict[str, Any]:
    """`document`: the FineTuneSweep as read; `fewest[point index]`: (GPUs, nodes) predicted to fit."""
    entries: list[dict[str, Any]] = []
    for point in points:
        entry = dict(copy.deepcopy(point.values))
        gpus, nodes = fewest.get(point.index, (point.wire.get("numberGpus"), point.wire.get("numberNodes")))
        for key, value in (("numberGpus", gpus), ("numberNodes", nodes)):
            if value is not None:
                entry[key] = value
        if entry and entry not in entries:
            entries.append(entry)
    if not entries:  # the template alone, with nothing to fill: the sweep as it was
        return copy.deepcopy(dict(document))
    if len(entries) > MAX_LIST_ENTRIES:
        raise TooManyPoints(
            f"the filled sweep has {len(entries)} points and a FineTuneSweep's include holds at most "
            f"{MAX_LIST_ENTRIES}: split the sweep (e.g. one per model) and fill each"
        )
    spec = {k: copy.deepcopy(v) for k, v in document["spec"].items() if k not in ("matrix", "include", "exclude")}
    template = dict(spec.get("template") or {})
    moved = {k: v for k, v in template.items() if is_distributed_setting(k)}
    if moved and any(e.get("numberGpus") == 1 for e in entries):
        spec["template"] = {k: v for k, v in template.items() if k not in moved}
        entries = [e if e.get("numberGpus") == 1 else {**moved, **e} for e in entries]
    return {**copy.deepcopy(dict(document)), "spec": {**spec, "include": entries}}
