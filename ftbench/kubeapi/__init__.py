"""Talking to the Kubernetes API server: one error type, two small request paths.

- `errors.KubeError`: what every failed call raises (status 0 when there was no answer), with
  `absent` / `conflict` / `temporary` / `server_message` so callers ask the same questions.
- `wire`: media types and `json_answer`, the one place an answer becomes JSON, None (a status
  the caller tolerates, e.g. 404 or 409) or a `KubeError`.
- `client.call`: over a `kubernetes` client connection (the operator's `Kube`, the local
  kubelet's `Rest`), for its kubeconfig and in-cluster handling.
- `http.request` with an `endpoint.ApiEndpoint`: standard library only (the trainer's progress
  reporter, the test control plane).

Importing this package, `errors`, `wire`, `endpoint` or `http` needs the standard library only.
"""

from ftbench.kubeapi.endpoint import ApiEndpoint
from ftbench.kubeapi.errors import ABSENT, CONFLICT, FORBIDDEN, KubeError

__all__ = ["ABSENT", "CONFLICT", "FORBIDDEN", "ApiEndpoint", "KubeError"]
