"""`Syncer`: coalescing, retrying passes over one object at a time, for every handler that reconciles.

kopf does not retry event handlers, and a lost pass would leave a finished run Running, so a failed
pass is retried here with exponential backoff; requests for an object already syncing are coalesced
into one more pass, so a burst of child events costs one or two API round trips. The follow path,
the start path and the sweep controller each run through one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ftbench.contracts.kube import ObjectKey
from ftbench.kubeapi import KubeError
from ftbench_operator.context import OperatorContext

log = logging.getLogger(__name__)
MAX_BACKOFF_SECONDS = 60.0

SyncFn = Callable[[OperatorContext, str, str], Awaitable[None]]


class Syncer:
    """Coalescing, retrying sync requests, one task per object at most.

    `sync` is what one pass does (follow an experiment, start one, reconcile a sweep), `handler`
    names it in the metrics."""

    def __init__(self, ctx: OperatorContext, sync: SyncFn, handler: str) -> None:
        self.ctx = ctx
        self.sync = sync
        self.handler = handler
        self.tasks: dict[ObjectKey, asyncio.Task[None]] = {}
        self.dirty: set[ObjectKey] = set()
        self.timers: dict[ObjectKey, asyncio.TimerHandle] = {}

    def request_later(self, namespace: str, name: str, delay: float) -> None:
        """One more sync after `delay` seconds (the pending deadline: no child event may come)."""
        key = (namespace, name)
        if key not in self.timers:
            loop = asyncio.get_running_loop()
            self.timers[key] = loop.call_later(delay, self._wake, key)

    def _wake(self, key: ObjectKey) -> None:
        self.timers.pop(key, None)
        self.request(*key)

    def request(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        if key in self.tasks:
            self.dirty.add(key)
            return
        self.tasks[key] = asyncio.create_task(self._run(key), name=f"{self.handler} {namespace}/{name}")

    async def _run(self, key: ObjectKey) -> None:
        delay = self.ctx.settings.api_retry_delay_seconds
        try:
            while True:
                self.dirty.discard(key)
                try:
                    with self.ctx.metrics.timed(self.handler):
                        await self.sync(self.ctx, *key)
                except Exception as err:  # a sync's failure must never end its retry loop
                    # An API error is expected now and then (one line); anything else is a bug (a traceback).
                    expected = isinstance(err, KubeError)
                    level = logging.WARNING if expected else logging.ERROR
                    message = "%s %s/%s failed (%s); retrying in %.0fs"
                    log.log(level, message, self.handler, *key, err, delay, exc_info=not expected)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF_SECONDS)
                    self.dirty.add(key)
                if key not in self.dirty:
                    return
        finally:
            self.tasks.pop(key, None)

    async def stop(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
