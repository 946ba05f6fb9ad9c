"""A FineTuneExperiment as the handlers read it: its body parsed once into a typed, frozen view.

Handlers used to index the raw object wherever they needed a field (`body["metadata"]["uid"]`,
`(body.get("status") or {}).get("attempt")`), each with its own idea of a missing one. Now
`ExperimentView.parse` reads it once, where a handler gets the object (`OperatorContext.fresh`,
`sync_once`), and the view is passed down. Only the operator writes the status, but it is read
defensively all the same (schema-checked, not trusted): a field that does not parse reads as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ftbench.api.status import ObjectRef, Phase
from ftbench.contracts.outcomes import FINISHED


def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _phase(value: Any) -> Phase | None:
    try:
        return Phase(value)
    except ValueError:
        return None


def _job(value: Any) -> ObjectRef | None:
    if not isinstance(value, Mapping) or not value:
        return None
    try:
        return ObjectRef.model_validate(value)
    except ValidationError:
        return None


@dataclass(frozen=True)
class ExperimentView:
    """What the handlers read of one experiment. `body` is kept for what needs the object itself
    (Events, owner references of the children)."""

    name: str
    namespace: str
    uid: str
    generation: int | None
    deleting: bool
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]  # as stored: status builders diff against it
    phase: Phase | None
    attempt: int
    job: ObjectRef | None  # status.job: the workload of the current attempt
    invalid_reason: str
    body: Mapping[str, Any]

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> ExperimentView:
        meta = body.get("metadata") or {}
        current = body.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            generation=_int(meta.get("generation")),
            deleting=bool(meta.get("deletionTimestamp")),
            annotations=MappingProxyType(dict(meta.get("annotations") or {})),
            spec=MappingProxyType(dict(body.get("spec") or {})),
            status=MappingProxyType(dict(current)),
            phase=_phase(current.get("phase")),
            attempt=_int(current.get("attempt"), 0) or 0,
            job=_job(current.get("job")),
            invalid_reason=str(current.get("invalidReason") or ""),
            body=body,
        )

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    def accepted_spec(self) -> tuple[dict[str, Any], int | None]:
        """The spec (and generation) the operator accepted when the run started; later edits are ignored.

        The record lives in `status.acceptedSpec`, which only the operator writes (the status
        subresource): an annotation would be user-writable, and a user who set one at create time
        would run a different spec than the one shown. Falls back to the current spec before the
        first start (nothing is recorded yet, so nothing can have diverged).
        """
        recorded = self.status.get("acceptedSpec")
        if isinstance(recorded, Mapping):
            return dict(recorded), _int(self.status.get("acceptedGeneration"))
        return dict(self.spec), self.generation
