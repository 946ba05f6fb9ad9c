"""Number types the wire models share, so every count, byte size and rate states its bound once.

Each is an `Annotated` type: the bound travels into the generated CRD (`minimum: 0`) and into
validation, exactly as the spelled-out `Annotated[int, Field(ge=0)]` it replaces.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# Something counted: steps, samples, tokens, bytes, ranks, generations, attempts.
Count = Annotated[int, Field(ge=0)]
# A measured amount that cannot be negative: seconds, rates, watts.
NonNegative = Annotated[float, Field(ge=0)]
# A percentage; above 100 is allowed (CPU use counts 100 per core).
Percent = Annotated[float, Field(ge=0)]
