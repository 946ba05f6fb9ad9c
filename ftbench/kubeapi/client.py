"""JSON calls over a `kubernetes` client connection (`ApiClient`), without its typed methods.

The operator and the local kubelet handle objects as plain dicts with the field names of the
Kubernetes docs (Jobs, PyTorchJobs, Pods and our own CR alike), but need the client's kubeconfig
and in-cluster handling, so both send requests through its configured connection with this one
function. The `kubernetes` package is imported only for type checking: callers bring the client.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from ftbench.contracts.kube import Obj
from ftbench.kubeapi.errors import KubeError
from ftbench.kubeapi.wire import JSON, json_answer

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Timeout = float | tuple[float, float]  # seconds: total, or (connect, read)


@cache
def transport_errors() -> tuple[type[Exception], ...]:
    """What a request raises when no answer came: the socket's OSError, urllib3's transport errors
    (timeouts, refused connections, protocol errors), the client's own (TLS set-up, OpenApiException;
    ApiValueError is a ValueError). Imported on first use: the caller has loaded the client."""
    from kubernetes.client.exceptions import OpenApiException
    from urllib3.exceptions import HTTPError

    return (OSError, ValueError, HTTPError, OpenApiException)


def call(
    api: ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: Mapping[str, str] | None = None,
    content_type: str = JSON,
    timeout: Timeout = 30.0,
    tolerate: Collection[int] = (),
) -> Obj | None:
    """The JSON answer (``{}`` when empty); None for a status in `tolerate`.

    Every failure is a `KubeError`: an error status, no answer (status 0; urllib3 transport
    errors and the client's own exceptions, e.g. for TLS) or an answer that is not JSON."""
    request = api.param_serialize(  # (method, url, headers, body, post_params): call_api's order
        method,
        path,
        query_params=list((query or {}).items()),
        header_params={"Accept": JSON, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(*request, _request_timeout=timeout)
        raw = response.read()
    except transport_errors() as err:
        raise KubeError.unreachable(err, f"{method} {path}") from err
    reason = str(getattr(response, "reason", "") or "")  # the client's RESTResponse has one
    return json_answer(response.status, reason, raw, what=f"{method} {path}", tolerate=tolerate)
