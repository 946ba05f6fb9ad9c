"""Strings with a length limit that writers truncate instead of failing on.

Every string in a status that a trainer (or a pod's termination message, or an API server's
Event) can fill is declared with `Bounded(limit)`: the generated CRD carries `maxLength`, so the
API server refuses anything longer, and the model cuts a longer value when it is built, so the
writer (operator or trainer) never sends one. A pod therefore cannot bloat an object, and a long
library error never turns into a refused status patch.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

# A status message: read by every watcher on every change, so a few KiB at most.
MESSAGE_MAX = 4096
# A CamelCase reason or a short token (engine, device, distributed mode).
REASON_MAX = 128
# A version string, an image reference, a GPU name.
NAME_MAX = 512


def bounded(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    tail = f" ... ({len(text) - limit} more characters; see the Events, the pod's log or `ftbench validate`)"
    if len(tail) >= limit:
        return text[:limit]
    return text[: limit - len(tail)] + tail


def _cutter(limit: int) -> BeforeValidator:
    def cut(value: Any) -> Any:
        return bounded(value, limit) if isinstance(value, str) else value

    return BeforeValidator(cut)


# The three sizes, as str types: `message: BoundedMessage = Field(...)`.
BoundedMessage = Annotated[str, _cutter(MESSAGE_MAX), Field(max_length=MESSAGE_MAX)]
BoundedReason = Annotated[str, _cutter(REASON_MAX), Field(max_length=REASON_MAX)]
BoundedName = Annotated[str, _cutter(NAME_MAX), Field(max_length=NAME_MAX)]
