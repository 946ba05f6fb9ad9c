"""A small asyncio facade over the Kubernetes API for the calls the operator makes itself.

kopf talks to the API for watching and for patching the object a change handler runs for;
everything else (creating children, writing an experiment's status from a pod event, listing
workloads) goes through here. The `kubernetes` client is blocking, so calls run in a bounded
thread pool; responses stay plain JSON dicts (no model classes: the operator handles Jobs,
PyTorchJobs and our own CR alike). API failures become `KubeError`; `temporary()` says whether
retrying later can help, so handlers can back off instead of failing or hot-looping.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from ftbench.api.resource import GROUP, PLURAL, VERSION

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Obj = dict[str, Any]
Objs = list[Obj]  # an alias: inside Kube, `list` names its method

# apiVersion/kind -> plural of every kind the operator creates, lists or deletes.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("batch/v1", "Job"): "jobs",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjobs",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjobs",
    (f"{GROUP}/{VERSION}", "FineTuneExperiment"): PLURAL,
}
EXPERIMENT_API_VERSION = f"{GROUP}/{VERSION}"
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read


def connect(pool_size: int) -> ApiClient:
    """In a pod: the service account; elsewhere: KUBECONFIG / ~/.kube/config (like kopf's login).

    The connection pool matches the thread pool: urllib3's default (5 x CPUs) would make extra
    threads open and drop connections under a burst of experiments."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


class KubeError(Exception):
    """An API call failed: HTTP `status` (0 when the server could not be reached)."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        self.status, self.reason, self.body = status, reason, body
        super().__init__(f"HTTP {status} {reason}: {body[:500]}")

    @property
    def server_message(self) -> str:
        """The API server's own explanation (the `message` of its Status body), else the raw error."""
        try:
            message = json.loads(self.body).get("message")
        except (ValueError, AttributeError):
            message = None
        return str(message) if message else f"HTTP {self.status} {self.reason}: {self.body[:500]}"

    @property
    def temporary(self) -> bool:
        """Worth retrying: unreachable, throttled, server-side or a conflict on a stale read."""
        return self.status in (0, 409, 429) or self.status >= 500


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    plural = PLURALS[(api_version, kind)]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


class Kube:
    """Blocking client calls run in `executor`; every method is a coroutine returning JSON."""

    def __init__(self, api: ApiClient, threads: int = 8) -> None:
        self.api = api
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ftbench-api")
        self.minor: int | None = None  # the server's Kubernetes minor version, once `server_minor` ran

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        import urllib3

        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            m, url, hdrs, data, _ = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(m, url, header_params=hdrs, body=data, _request_timeout=REQUEST_TIMEOUT)
            raw = response.read()
        except urllib3.exceptions.HTTPError as err:
            raise KubeError(0, type(err).__name__, str(err)) from err
        if not 200 <= response.status <= 299:
            raise KubeError(response.status, str(response.reason), raw.decode(errors="replace") if raw else "")
        return json.loads(raw) if raw else {}

    async def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, partial(self._request, method, path, **kwargs))

    # Experiments -----------------------------------------------------------------------

    def experiment_path(self, namespace: str, name: str) -> str:
        return f"{collection_path(EXPERIMENT_API_VERSION, 'FineTuneExperiment', namespace)}/{name}"

    async def get_experiment(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self.request("GET", self.experiment_path(namespace, name))
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    async def patch_experiment_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj | None:
        """Merge-patch `status` (the status subresource, so spec and metadata cannot change)."""
        try:
            return await self.request(
                "PATCH",
                self.experiment_path(namespace, name) + "/status",
                body={"status": dict(status)},
                content_type="application/merge-patch+json",
            )
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    async def patch_experiment_metadata(self, namespace: str, name: str, metadata: Mapping[str, Any]) -> None:
        try:
            await self.request(
                "PATCH",
                self.experiment_path(namespace, name),
                body={"metadata": dict(metadata)},
                content_type="application/merge-patch+json",
            )
        except KubeError as err:
            if err.status != 404:
                raise

    # Children ----------------------------------------------------------------------------

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create `obj`; False when one of that name already exists (409). Whose it is, the caller
        decides from its owner references (`children.create_all`): a name alone proves nothing."""
        meta = obj["metadata"]
        try:
            await self.request("POST", collection_path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj)
        except KubeError as err:
            if err.status == 409:
                return False
            raise
        return True

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return await self.request("GET", f"{collection_path(api_version, kind, namespace)}/{name}")
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    async def list(self, api_version: str, kind: str, namespace: str, selector: str) -> Objs:
        try:
            found = await self.request(
                "GET", collection_path(api_version, kind, namespace), query={"labelSelector": selector}
            )
        except KubeError as err:
            if err.status == 404:  # the kind is not served (e.g. no training operator CRD)
                return []
            raise
        return list(found.get("items") or [])

    async def events(self, namespace: str, involved: str, reason: str) -> Objs:
        """Events about object `involved` with `reason`; [] when the operator may not list them."""
        selector = f"involvedObject.name={involved},reason={reason}"
        try:
            found = await self.request(
                "GET", f"/api/v1/namespaces/{namespace}/events", query={"fieldSelector": selector}
            )
        except KubeError as err:
            if err.status in (403, 404):
                return []
            raise
        return list(found.get("items") or [])

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete in the background: the garbage collector removes the child's own pods."""
        try:
            await self.request(
                "DELETE",
                f"{collection_path(api_version, kind, namespace)}/{name}",
                query={"propagationPolicy": "Background"},
            )
        except KubeError as err:
            if err.status != 404:
                raise

    # Cluster facts -------------------------------------------------------------------------

    async def server_minor(self) -> int | None:
        try:
            version = await self.request("GET", "/version")
        except KubeError:
            return None
        digits = "".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
        self.minor = int(digits) if digits else None
        return self.minor

    async def has_crd(self, name: str) -> bool:
        try:
            await self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        except KubeError as err:
            if err.status in (403, 404):
                return False
            raise
        return True

    async def cluster_object_names(self, api_version: str, plural: str) -> frozenset[str] | None:
        """Names of a cluster-scoped kind (e.g. ClusterTrainingRuntimes); None when not served or not allowed."""
        try:
            found = await self.request("GET", f"/apis/{api_version}/{plural}")
        except KubeError as err:
            if err.status in (403, 404):
                return None
            raise
        return frozenset(str((i.get("metadata") or {}).get("name", "")) for i in found.get("items") or [])

    async def exists(self, path: str) -> bool | None:
        """Whether the object at `path` exists; None when the operator may not look (403)."""
        try:
            await self.request("GET", path)
        except KubeError as err:
            if err.status == 404:
                return False
            if err.status == 403:
                return None
            raise
        return True

    async def get_config_map(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except KubeError as err:
            if err.status in (403, 404):
                return None
            raise
