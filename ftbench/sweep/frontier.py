"""The OOM frontier: which points need at least as much GPU memory as another.

Memory per GPU grows with the per-device batch and the sequence length when everything else is
equal (model, method, sharding, GPU count, dtype...). So point B "needs at least as much" as A
when their specs differ only in batchSize and modelMaxLength, and B's per-device batch and
sequence length are both at least A's. That is a partial order, known without a memory model;
a sweep runs points in a total order that extends it (smallest per-device tokens first), and
when A runs out of GPU memory every B above it is predicted to as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ftbench.api.effective import per_device_batch_size
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.sweep.points import SweepPoint

# The two fields memory demand is ordered by; every other field must be equal to compare.
DEMAND_FIELDS = ("batchSize", "modelMaxLength")


def demand(spec: FineTuneExperimentSpec) -> tuple[int, int]:
    """(per-device batch, sequence length): what the per-GPU activation memory grows with."""
    return per_device_batch_size(spec), spec.model_max_length


def group_key(spec: FineTuneExperimentSpec) -> str:
    """Everything but the demand fields: two points compare only within one group."""
    wire = {k: v for k, v in spec.to_wire().items() if k not in DEMAND_FIELDS}
    return json.dumps(wire, sort_keys=True)


def needs_at_least(upper: SweepPoint, lower: SweepPoint) -> bool:
    """True when `upper` needs at least as much GPU memory as `lower` (and is another point)."""
    if upper.index == lower.index or upper.spec is None or lower.spec is None:
        return False
    if group_key(upper.spec) != group_key(lower.spec):
        return False
    (ub, ul), (lb, ll) = demand(upper.spec), demand(lower.spec)
    return ub >= lb and ul >= ll


def memory_order(points: Iterable[SweepPoint]) -> list[SweepPoint]:
    """Valid points, smallest memory demand first: per-device tokens, then batch, then point order.
    Whenever `needs_at_least(b, a)`, a comes before b."""
    valid = [p for p in points if p.spec is not None]

    def key(point: SweepPoint) -> tuple[int, int, int, int]:
        assert point.spec is not None
        batch, length = demand(point.spec)
        return batch * length, batch, length, point.index

    return sorted(valid, key=key)
