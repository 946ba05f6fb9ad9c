"""Everything the handlers share within one operator process, built in `on.startup` (kopf memo).

Also the per-experiment lock: kopf serialises change handlers per object, but the follow path
(`handlers.handle_follow`) runs from child events; both write the experiment's status, so both
take the experiment's lock and read the object fresh inside it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import kopf

from ftbench.contracts.kube import ObjectKey
from ftbench.kubeapi import KubeError
from ftbench_operator.body import ExperimentView
from ftbench_operator.kube import Kube
from ftbench_operator.metrics import OperatorMetrics
from ftbench_operator.profile_source import ProfileSource
from ftbench_operator.settings import OperatorSettings

log = logging.getLogger("ftbench_operator")


@dataclass
class OperatorContext:
    settings: OperatorSettings
    kube: Kube
    profiles: ProfileSource
    metrics: OperatorMetrics
    locks: dict[ObjectKey, asyncio.Lock] = field(default_factory=dict)
    # Set by the first pod event; the follow path reads pods from it (no API list per event).
    pods: kopf.Index[Any, Any] | None = None
    # Set by the Syncer: look at an experiment again later (deadlines that no child event announces).
    request_sync_later: Callable[[str, str, float], None] | None = None
    # resourceVersion of the last status written per sweep: the watch event of that write brings
    # nothing new, so it needs no reconcile pass (half the passes of a busy sweep).
    own_writes: dict[ObjectKey, str] = field(default_factory=dict)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self.locks.setdefault((namespace, name), asyncio.Lock())

    @asynccontextmanager
    async def fresh(self, body: Mapping[str, Any]) -> AsyncIterator[ExperimentView | None]:
        """Hold the experiment's lock and yield it as the API server has it now (None: gone).

        Handlers act on this, not on the event's body: another writer may have moved it on."""
        seen = ExperimentView.parse(body)
        async with self.lock(seen.namespace, seen.name):
            found = await self.kube.get_experiment(seen.namespace, seen.name)
            yield None if found is None else ExperimentView.parse(found)

    def forget(self, namespace: str, name: str) -> None:
        lock = self.locks.get((namespace, name))
        if lock is not None and not lock.locked():
            del self.locks[(namespace, name)]
        self.metrics.forget(namespace, name)

    def forget_sweep(self, namespace: str, name: str) -> None:
        self.own_writes.pop((namespace, name), None)
        self.metrics.forget_sweep(namespace, name)


@contextmanager
def api_errors(delay: float) -> Iterator[None]:
    """Map API failures to kopf's retry semantics: temporary ones back off and retry, others
    (a 4xx that will not change by itself) stop retrying instead of looping every few seconds."""
    try:
        yield
    except KubeError as err:
        if err.temporary:
            raise kopf.TemporaryError(str(err), delay=delay) from err
        raise kopf.PermanentError(str(err)) from err


def event(experiment: ExperimentView | Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
    """A Kubernetes Event on the experiment, or on the object whose body is given (a sweep); kopf
    posts it in the background, never raising here."""
    body = experiment.body if isinstance(experiment, ExperimentView) else experiment
    try:
        kopf.event(
            dict(body),  # type: ignore[arg-type]  # kopf takes any mapping as the body
            type="Warning" if warning else "Normal",
            reason=reason,
            message=message[:1024],
        )
    except Exception:  # posting is best effort; a missing event must not fail a reconcile
        log.exception("could not queue event %s", reason)
