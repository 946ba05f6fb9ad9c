"""ftbench.kubeapi: one error type and one reading of an answer for every API client path."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from api_stub import ApiStub, serving

from ftbench.kubeapi import ABSENT, CONFLICT, ApiEndpoint, KubeError, client, http
from ftbench.kubeapi.wire import MERGE_PATCH, json_answer


def test_kube_error_summary_and_questions() -> None:
    status = json.dumps({"kind": "Status", "message": 'pods "p" not found'})
    err = KubeError(404, "Not Found", status)
    assert str(err).startswith("HTTP 404 Not Found: {") and err.absent and not err.conflict
    assert err.server_message == 'pods "p" not found' and not err.temporary
    assert str(KubeError(404, "", "x")) == "HTTP 404: x"
    assert KubeError(500, "Oops", "<html>").server_message == "HTTP 500 Oops: <html>"
    assert KubeError(409, "Conflict").conflict and KubeError(409, "Conflict").temporary
    assert KubeError(429, "").temporary and KubeError(503, "").temporary and not KubeError(422, "").temporary
    down = KubeError.unreachable(ConnectionRefusedError("refused"), "GET /x")
    assert (down.status, down.reason, down.body) == (0, "ConnectionRefusedError", "GET /x: refused")
    assert down.temporary and isinstance(down, RuntimeError)


def test_json_answer_tolerates_only_the_named_statuses() -> None:
    assert json_answer(200, "OK", b'{"a": 1}', what="GET /x") == {"a": 1}
    assert json_answer(201, "Created", b"", what="POST /x") == {}
    assert json_answer(404, "Not Found", b"{}", what="GET /x", tolerate=(ABSENT,)) is None
    with pytest.raises(KubeError, match="HTTP 409 Conflict: taken") as err:
        json_answer(409, "Conflict", b"taken", what="POST /x", tolerate=(ABSENT,))
    assert err.value.conflict
    with pytest.raises(KubeError, match="GET /x: not JSON"):
        json_answer(200, "OK", b"<html>", what="GET /x")


class _Response:
    def __init__(self, status: int, data: bytes, reason: str = "") -> None:
        self.status, self.data, self.reason = status, data, reason

    def read(self) -> bytes:
        return self.data


class _Api:
    """The two `kubernetes.client.ApiClient` methods `client.call` uses."""

    configuration = SimpleNamespace(host="https://127.0.0.1:6443")

    def __init__(self, answer: _Response | Exception) -> None:
        self.answer = answer
        self.sent: dict[str, Any] = {}

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        self.sent = {"method": method, "path": path, **kwargs}
        return method, path, kwargs["header_params"], kwargs["body"], None

    def call_api(self, *_: Any, **kwargs: Any) -> _Response:
        self.sent["timeout"] = kwargs["_request_timeout"]
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_client_call_over_a_kubernetes_connection() -> None:
    api = _Api(_Response(201, b'{"kind": "Pod"}'))
    got = client.call(api, "PATCH", "/p", body={"a": 1}, query={"q": "1"}, content_type=MERGE_PATCH, timeout=3.0)  # type: ignore[arg-type]
    assert got == {"kind": "Pod"}
    assert api.sent["header_params"]["Content-Type"] == MERGE_PATCH and api.sent["query_params"] == [("q", "1")]
    assert api.sent["timeout"] == 3.0 and api.sent["auth_settings"] == ["BearerToken"]
    assert client.call(_Api(_Response(409, b"", "Conflict")), "POST", "/p", tolerate=(CONFLICT,)) is None  # type: ignore[arg-type]
    with pytest.raises(KubeError, match="HTTP 403 Forbidden: no") as err:
        client.call(_Api(_Response(403, b"no", "Forbidden")), "GET", "/p")  # type: ignore[arg-type]
    assert err.value.status == 403
    with pytest.raises(KubeError, match="OSError") as err:
        client.call(_Api(OSError("tls")), "GET", "/p")  # type: ignore[arg-type]
    assert err.value.status == 0


@pytest.fixture
def server() -> Iterator[tuple[ApiEndpoint, type[ApiStub]]]:
    with serving(answer=b'{"message": "said so"}') as (url, handler):
        yield ApiEndpoint(f"{url}/", token="tok"), handler


def test_http_request_with_the_standard_library(server: tuple[ApiEndpoint, type[ApiStub]]) -> None:
    endpoint, handler = server
    assert http.request(endpoint, "PATCH", "/x", {"a": 1}, content_type=MERGE_PATCH) == b'{"message": "said so"}'
    (seen,) = handler.seen
    assert (seen["path"], json.loads(seen["body"])) == ("/x", {"a": 1})
    assert seen["headers"]["Authorization"] == "Bearer tok" and seen["headers"]["Content-Type"] == MERGE_PATCH
    handler.status = 404
    with pytest.raises(KubeError) as err:
        http.request(endpoint, "GET", "/y")
    assert err.value.absent and err.value.server_message == "said so"
    with pytest.raises(KubeError) as err:
        http.request(ApiEndpoint("http://127.0.0.1:9"), "GET", "/y", timeout=1)
    assert err.value.status == 0 and "GET /y" in err.value.body


def test_stdlib_modules_import_without_the_kubernetes_client() -> None:
    """The trainer image has no `kubernetes` package: everything but `client` must import without it."""
    code = (
        "import sys; sys.modules['kubernetes'] = None; sys.modules['urllib3'] = None\n"
        "import ftbench.kubeapi.http, ftbench.kubeapi.client, ftbench_trainer.progress_reporter"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
