"""`ApiEndpoint`: where an API server is and how to authenticate to it, without a client library.

Used by the standard-library request path (`ftbench.kubeapi.http`): the trainer's progress
reporter (in-cluster service account) and the test control plane (a static token and its CA).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ApiEndpoint:
    """Where and how to reach the API server. The token file is re-read on every request
    because projected service-account tokens rotate (about hourly)."""

    server: str
    token: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None

    @classmethod
    def in_cluster(
        cls, environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
    ) -> ApiEndpoint | None:
        """The pod's own service account; None outside a cluster (no service host or no token)."""
        environ = os.environ if environ is None else environ
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
        token_file = sa_dir / "token"
        if not host or not token_file.exists():
            return None
        if ":" in host:  # IPv6
            host = f"[{host}]"
        ca = sa_dir / "ca.crt"
        return cls(server=f"https://{host}:{port}", token_file=token_file, ca_file=ca if ca.exists() else None)

    def url(self, path: str) -> str:
        return self.server.rstrip("/") + path

    def bearer(self) -> str:
        if self.token_file is not None:
            return self.token_file.read_text().strip()
        return self.token or ""

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
