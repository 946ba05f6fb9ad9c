"""Numbers as `FineTuneExperiment.status` shows them: rounded once, here.

The status is read by people (`kubectl get fte` printed tokens/s as 3489.5482115405125), so every
float the operator writes there keeps at least 2 decimals and at least 4 significant digits:
3489.5482 -> 3489.55, 45.6789 -> 45.68, 5.6789 -> 5.679, 0.0123456 -> 0.01235. Nothing else
rounds: the trainer's result (termination message, result file, `ftbench run`'s JSON and the
local results store) keeps the exact values.
"""

from __future__ import annotations

import math
from typing import TypeVar

from pydantic import BaseModel

MIN_DECIMALS = 2
MIN_SIGNIFICANT = 4

M = TypeVar("M", bound=BaseModel)


def display_round(value: float) -> float:
    """`value` with at least MIN_DECIMALS decimals and MIN_SIGNIFICANT significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    magnitude = math.floor(math.log10(abs(value)))
    return round(value, max(MIN_DECIMALS, MIN_SIGNIFICANT - 1 - magnitude))


def rounded(model: M) -> M:
    """`model` with each of its own float fields rounded for display (nested models untouched)."""
    return model.model_copy(update={name: display_round(v) for name, v in model if isinstance(v, float)})
