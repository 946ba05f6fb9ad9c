"""`KubeError`: the one exception every ftbench call to the Kubernetes API raises.

The operator, the local kubelet, the test control plane and the trainer's progress reporter all
talk to the API server; they share this type so that a caller has one thing to catch and one set
of questions to ask it (absent? a conflict? worth retrying?). Standard library only: the trainer
image has neither the `kubernetes` client nor kopf.
"""

from __future__ import annotations

import json

# The statuses callers tolerate by name: "it is not there" and "it is already there / changed".
FORBIDDEN = 403
ABSENT = 404
CONFLICT = 409


class KubeError(RuntimeError):
    """An API call failed: HTTP `status` (0 when the server could not be reached), its `reason`
    phrase (for status 0, the transport error's type) and the answer's `body` (the server's
    Status object as JSON, or a description of what went wrong)."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        self.status, self.reason, self.body = status, reason, body
        super().__init__(self.summary)

    @classmethod
    def unreachable(cls, err: BaseException, what: str = "") -> KubeError:
        """No answer at all (refused, timed out, TLS failure): status 0, retrying may help."""
        return cls(0, type(err).__name__, f"{what}: {err}" if what else str(err))

    @property
    def summary(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"HTTP {self.status}{reason}: {self.body[:500]}"

    @property
    def server_message(self) -> str:
        """The API server's own explanation (the `message` of its Status body), else the summary."""
        try:
            message = json.loads(self.body).get("message")
        except (ValueError, AttributeError):
            message = None
        return str(message) if message else self.summary

    @property
    def absent(self) -> bool:
        return self.status == ABSENT

    @property
    def conflict(self) -> bool:
        return self.status == CONFLICT

    @property
    def temporary(self) -> bool:
        """Worth retrying: unreachable, throttled, server-side or a conflict on a stale read."""
        return self.status in (0, CONFLICT, 429) or self.status >= 500
