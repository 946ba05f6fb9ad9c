"""A JSON answer from an `http.server` handler, framed (the predictor service; tests' stand-in endpoints)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


def send_json(handler: BaseHTTPRequestHandler, code: int, body: object) -> None:
    """One JSON answer with its length (http.server leaves framing to the handler)."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
