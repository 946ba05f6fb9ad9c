"""`WireModel`: the one pydantic base of everything ftbench writes for another process to read.

Plans, results, API objects and catalog files all travel as camelCase JSON/YAML (`batchSize`),
while Python code uses snake_case names, so both spellings are accepted on input
(`populate_by_name`). Unknown fields are refused (`extra="forbid"`): a typo or a field from a
newer schema fails loudly instead of being dropped. Instances are immutable (`frozen`): a value
that crossed a boundary is a record, and a changed copy is made with `model_copy(update=...)`.
Keeping these settings in one place keeps every contract's wire form the same.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
