"""One JSON-over-HTTPS request to the API server with the standard library only.

For the places that must not depend on the `kubernetes` client: the trainer's progress reporter
(the trainer image has no client) and the test control plane (the core package imports with
pydantic + pyyaml only). Failures are the same `KubeError` the client path raises.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ftbench.kubeapi.endpoint import ApiEndpoint
from ftbench.kubeapi.errors import KubeError
from ftbench.kubeapi.wire import JSON, succeeded


def request(
    endpoint: ApiEndpoint,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    accept: str = JSON,
    timeout: float = 10.0,
) -> bytes:
    """The raw answer of a 2xx response; an error status or no answer raises `KubeError`.

    `body` is sent as JSON (`content_type` says how the server reads it, e.g. a merge patch);
    `accept` selects another representation, e.g. the Table kubectl prints."""
    data = json.dumps(body).encode() if body is not None else None
    url = endpoint.url(path)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {endpoint.bearer()}")
    req.add_header("Accept", accept)
    if data is not None:
        req.add_header("Content-Type", content_type)
    context = endpoint.ssl_context() if url.startswith("https") else None
    try:
        with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
            status, reason, raw = resp.status, str(resp.reason), resp.read()
    except urllib.error.HTTPError as err:
        status, reason, raw = err.code, str(err.reason), err.read()
    except OSError as err:  # URLError, refused, timed out, TLS
        raise KubeError.unreachable(err, f"{method} {path}") from err
    succeeded(status, reason, raw)
    return raw
