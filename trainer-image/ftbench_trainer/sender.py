"""`ThrottledSender`: what every report from the trainer to a server shares.

Rank 0 tells two servers how training goes: the API server (`status.progress`,
`ftbench_trainer.progress_reporter`) and, inside a Kubeflow TrainJob, Trainer's status endpoint
(`ftbench_trainer.kubeflow_status`). Neither may fail or slow training, so both go through this:
`offer()` only keeps the latest body and wakes one daemon thread that sends it; at most one body per
`min_interval_seconds` is accepted, except a `final` one; a failed send (no permission, server
away, timeout, TLS) is counted, remembered in `last_error`, logged on the first and every 10th
failure, and otherwise ignored. A subclass says how one body is sent (`_send`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0


class ThrottledSender:
    """Throttled, non-blocking, failure-proof sends of the latest body."""

    def __init__(
        self,
        what: str,
        *,
        min_interval_seconds: float,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.min_interval = min_interval_seconds
        self.timeout = timeout_seconds
        self.clock = clock
        self.sent = 0
        self.failures = 0
        self.last_error: str | None = None
        self._last_accepted: float | None = None
        self._pending: Any = None
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def _send(self, body: Any) -> None:
        raise NotImplementedError

    def offer(self, make_body: Callable[[], Any], *, final: bool = False) -> bool:
        """Queue the body `make_body` builds (only when accepted); False when throttled or closed.
        Never raises, never blocks on I/O."""
        try:
            now = self.clock()
            with self._cond:
                if self._closed:
                    return False
                if not final and self._last_accepted is not None and now - self._last_accepted < self.min_interval:
                    return False
                self._last_accepted = now
                self._pending = make_body()
                self._ensure_thread()
                self._cond.notify_all()
            return True
        except Exception as err:  # a reporter never fails training: the failure is recorded and reported
            self._record_failure(err)
            return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued body was sent (or failed); True if nothing is left."""
        deadline = self.clock() + (self.timeout if timeout is None else timeout)
        with self._cond:
            while self._pending is not None or self._busy:
                left = deadline - self.clock()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (bounded by `timeout`), then stop the sender thread."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"ftbench-{self.what}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                body, self._pending, self._busy = self._pending, None, True
            try:
                self._send(body)
                self.sent += 1
            except Exception as err:  # as in offer(): the sending thread never dies of a failed send
                self._record_failure(err)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _record_failure(self, err: BaseException) -> None:
        self.failures += 1
        self.last_error = f"{type(err).__name__}: {err}"  # a KubeError carries the server's answer
        # Log the first failure and then every 10th: a broken channel must not flood the training log.
        if self.failures == 1 or self.failures % 10 == 0:
            log.warning("%s %d failed (training continues): %s", self.what, self.failures, self.last_error)
