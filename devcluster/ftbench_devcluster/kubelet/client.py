"""The kubelet's REST client: JSON in, JSON out, one error type.

The kubelet handles pods as plain dicts with the field names of the Kubernetes docs and sends
merge patches as such, so it talks to the API server through the `kubernetes` client's
configured connection (any kubeconfig auth) with `ftbench.kubeapi.client.call`, the path the
operator uses too. Every failure of a call (an HTTP error status, an unreachable server, an
unreadable body) is a `ftbench.kubeapi.KubeError`, so the kubelet's loops have one thing to catch
and log; it is re-exported here for the kubelet's callers.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ftbench.contracts.kube import Obj
from ftbench.kubeapi import ABSENT, CONFLICT, KubeError
from ftbench.kubeapi import client as kubeapi
from ftbench.kubeapi.wire import JSON, MERGE_PATCH

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["ApiObjects", "KubeError", "Rest"]

REQUEST_TIMEOUT = 30  # seconds


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
        return kubeapi.call(
            self.api,
            method,
            path,
            body=body,
            content_type=MERGE_PATCH if patch else JSON,
            timeout=REQUEST_TIMEOUT,
            tolerate=(ABSENT, CONFLICT) if missing_ok else (),
        )


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
