"""What goes over the wire to the API server: media types, and how an answer is read.

Every client path (`client.call` over the `kubernetes` connection, `http.request` over the
standard library) reads an answer here, so a failed status becomes a `KubeError` the same way
everywhere and the statuses a caller tolerates (absence, conflict) are handled in one place.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from ftbench.contracts.kube import Obj
from ftbench.kubeapi.errors import KubeError

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def succeeded(status: int, reason: str, raw: bytes, *, tolerate: Collection[int] = ()) -> bool:
    """True for a 2xx answer, False for a status in `tolerate`; any other status raises."""
    if 200 <= status <= 299:
        return True
    if status in tolerate:
        return False
    raise KubeError(status, reason, raw.decode(errors="replace") if raw else "")


def json_answer(status: int, reason: str, raw: bytes, *, what: str, tolerate: Collection[int] = ()) -> Obj | None:
    """The answer's JSON object (``{}`` when empty); None for a tolerated status."""
    if not succeeded(status, reason, raw, tolerate=tolerate):
        return None
    try:
        return json.loads(raw) if raw else {}
    except ValueError as err:
        raise KubeError(status, reason, f"{what}: not JSON: {err}") from err
