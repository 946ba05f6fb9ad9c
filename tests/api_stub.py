"""A local HTTP server standing in for the API server, for the stdlib clients' tests.

`ftbench.kubeapi.http` and the trainer's progress reporter talk to the API server with the
standard library only; these tests check what they send (method, path, headers, body) and what
they make of each answer, which a real API server would not let a test choose.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class ApiStub(BaseHTTPRequestHandler):
    """Records every request in `seen` and answers `status` with `answer` (set them per test)."""

    status = 200
    answer = b"{}"
    seen: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        self._answer(b"")

    def do_PATCH(self) -> None:
        self._answer(self.rfile.read(int(self.headers["Content-Length"])))

    def _answer(self, body: bytes) -> None:
        type(self).seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).answer)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(answer: bytes = b"{}") -> Iterator[tuple[str, type[ApiStub]]]:
    """A fresh stub (its own `seen`) on a free port: yields its base URL and its handler class."""
    handler = type("Stub", (ApiStub,), {"status": 200, "answer": answer, "seen": []})
    httpd = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", handler
    finally:
        httpd.shutdown()
