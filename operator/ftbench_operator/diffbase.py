"""kopf's "last handled configuration", kept within the annotation size limit.

kopf stores a copy of what it last handled (spec, labels, annotations) in one annotation, to
tell an update from a re-delivered event. By default that copy includes every user annotation:
an experiment with ~130 KB of annotations then needs a second copy of them, the patch exceeds
the API server's 256 KB limit for all annotations together, is refused, and kopf, never able
to record that it handled the object, runs the handlers again on every event.

The operator reacts to the spec and to one annotation (`ftbench.io/retry`); nothing else of the
metadata matters to a diff. So the copy keeps only those annotations, and of them only a digest:
a change of value is still a change, and a user cannot make the copy large. The spec itself is
bounded by the CRD's own limits (lengths and item counts of every field).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

import kopf


def digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


class BoundedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """`AnnotationsDiffBaseStorage` whose essence keeps only `tracked` annotations, as digests."""

    def __init__(self, *, prefix: str, key: str, tracked: Collection[str]) -> None:
        super().__init__(prefix=prefix, key=key)
        self.tracked = frozenset(tracked)

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        annotations = (essence.get("metadata") or {}).get("annotations") or {}
        for name in list(annotations):
            if name in self.tracked:
                annotations[name] = digest(str(annotations[name]))
            else:
                del annotations[name]
        self.remove_empty_stanzas(essence)
        return essence
