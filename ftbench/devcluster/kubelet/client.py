"""The kubelet's REST client: JSON in, JSON out, one error type.

The kubelet handles pods as plain dicts with the field names of the Kubernetes docs and sends
merge patches as such, so it talks to the API server through the `kubernetes` client's
configured connection (any kubeconfig auth) without the typed API methods. Every failure of a
call (an HTTP error status, an unreachable server, an unreadable body) is a `KubeError`, so the
kubelet's loops have one thing to catch and log.

``ftbench.devcluster.ControlPlane.request`` is a second, stdlib-only request helper (for tests
and ``ftbench dev``, which must work without the `kubernetes` package); it is not this client.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Obj = dict[str, Any]
REQUEST_TIMEOUT = 30  # seconds


class KubeError(RuntimeError):
    """A call to the API server failed; ``status`` is its HTTP status, 0 when there was no answer."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail[:500]}" if status else detail)
        self.status = status


class Rest:
    """JSON calls over the `kubernetes` client's configured connection."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.server = str(api.configuration.host)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | os.PathLike[str]) -> Rest:
        from kubernetes import config

        return cls(config.new_client_from_config(config_file=str(kubeconfig)))

    def call(
        self, method: str, path: str, body: Obj | None = None, *, patch: bool = False, missing_ok: bool = False
    ) -> Obj | None:
        """The JSON answer (``{}`` for an empty one); None for 404/409 when ``missing_ok``."""
        content_type = "application/merge-patch+json" if patch else "application/json"
        params = self.api.param_serialize(
            method,
            path,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api.call_api(*params, _request_timeout=REQUEST_TIMEOUT)
            data = resp.read()
        except Exception as err:  # urllib3 transport errors, the client's ApiException (TLS)
            raise KubeError(0, f"{method} {path}: {type(err).__name__}: {err}") from err
        if missing_ok and resp.status in (404, 409):
            return None
        if resp.status >= 300:
            raise KubeError(resp.status, data.decode(errors="replace"))
        try:
            return json.loads(data) if data else {}
        except ValueError as err:
            raise KubeError(resp.status, f"{method} {path}: not JSON: {err}") from err


class ApiObjects:
    """``podspec.ObjectSource`` over the API server: what a pod spec references."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self.rest.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", missing_ok=True)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.rest.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", missing_ok=True)

    def service_account_token(self, namespace: str, account: str, audience: str | None, seconds: int) -> str:
        spec: Obj = {"expirationSeconds": max(seconds, 600)}
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        res = self.rest.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body)
        return str((res or {}).get("status", {}).get("token", ""))
