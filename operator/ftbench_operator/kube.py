"""A small asyncio facade over the Kubernetes API for the calls the operator makes itself.

kopf talks to the API for watching and for patching the object a change handler runs for;
everything else (creating children, writing an experiment's status from a pod event, listing
workloads) goes through here. The `kubernetes` client is blocking, so calls run in a bounded
thread pool; responses stay plain JSON dicts (no model classes: the operator handles Jobs,
PyTorchJobs and our own CR alike). Requests go through `ftbench.kubeapi.client.call`, the one
client path (shared with the local kubelet): API failures become `ftbench.kubeapi.KubeError`
(re-exported here), whose `temporary` says whether retrying later can help, so handlers can back
off instead of failing or hot-looping; the statuses a method tolerates (absent, conflict,
forbidden) are passed as `tolerate` and come back as None.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from ftbench.api.resource import GROUP, PLURAL, SWEEP_KIND, SWEEP_PLURAL, VERSION
from ftbench.contracts.kube import Obj
from ftbench.kubeapi import ABSENT, CONFLICT, FORBIDDEN, KubeError
from ftbench.kubeapi import client as kubeapi
from ftbench.kubeapi.wire import JSON, MERGE_PATCH
from ftbench.render.registry import WORKLOAD_KINDS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["EXPERIMENT_API_VERSION", "PLURALS", "Kube", "KubeError", "collection_path", "connect"]

Objs = list[Obj]  # an alias: inside Kube, `list` names its method
NOT_VISIBLE = (FORBIDDEN, ABSENT)  # not served, or the operator may not look: the same to a reader

# apiVersion/kind -> plural of every kind the operator creates, lists or deletes.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    **{(w.api_version, w.kind): w.plural for w in WORKLOAD_KINDS},  # each runtime's (render.registry)
    (f"{GROUP}/{VERSION}", "FineTuneExperiment"): PLURAL,
    (f"{GROUP}/{VERSION}", SWEEP_KIND): SWEEP_PLURAL,
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

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> Obj:
        """The JSON answer; every failure raises `KubeError`."""
        return await self.request_or_none(method, path, (), body=body, query=query, content_type=content_type) or {}

    async def request_or_none(
        self,
        method: str,
        path: str,
        tolerate: Collection[int],
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> Obj | None:
        """The JSON answer, or None when the server answered with a status in `tolerate`."""
        call = partial(
            kubeapi.call,
            self.api,
            method,
            path,
            body=body,
            query=query,
            content_type=content_type,
            timeout=REQUEST_TIMEOUT,
            tolerate=tolerate,
        )
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    # Experiments -----------------------------------------------------------------------

    def experiment_path(self, namespace: str, name: str, kind: str = "FineTuneExperiment") -> str:
        return f"{collection_path(EXPERIMENT_API_VERSION, kind, namespace)}/{name}"

    async def get_experiment(self, namespace: str, name: str, kind: str = "FineTuneExperiment") -> Obj | None:
        """The experiment (or, with `kind`, another ftbench.io object such as a FineTuneSweep); None: gone."""
        return await self.request_or_none("GET", self.experiment_path(namespace, name, kind), (ABSENT,))

    async def patch_experiment_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        kind: str = "FineTuneExperiment",
        uid: str | None = None,
    ) -> Obj | None:
        """Merge-patch `status` (the status subresource, so spec and metadata cannot change).

        With `uid`, only onto that incarnation: a patch goes by name, and a handler that acted on an
        object deleted meanwhile (a sweep deleted and re-created at once re-creates its children under
        the same names) must not write its run into the new object of that name. The server ignores
        metadata in a status patch, so the uid is checked just before; None: not written."""
        if uid is not None:
            current = await self.get_experiment(namespace, name, kind)
            if current is None or (current.get("metadata") or {}).get("uid") != uid:
                return None
        path = self.experiment_path(namespace, name, kind) + "/status"
        return await self.request_or_none(
            "PATCH", path, (ABSENT,), body={"status": dict(status)}, content_type=MERGE_PATCH
        )

    async def patch_experiment_metadata(self, namespace: str, name: str, metadata: Mapping[str, Any]) -> None:
        path = self.experiment_path(namespace, name)
        await self.request_or_none(
            "PATCH", path, (ABSENT,), body={"metadata": dict(metadata)}, content_type=MERGE_PATCH
        )

    # Children ----------------------------------------------------------------------------

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create `obj`; False when one of that name already exists (409). Whose it is, the caller
        decides from its owner references (`children.create_all`): a name alone proves nothing."""
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], obj["kind"], meta["namespace"])
        return await self.request_or_none("POST", path, (CONFLICT,), body=obj) is not None

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return await self.request_or_none("GET", f"{collection_path(api_version, kind, namespace)}/{name}", (ABSENT,))

    async def list(self, api_version: str, kind: str, namespace: str, selector: str) -> Objs:
        """[] also when the kind is not served (e.g. no training operator CRD)."""
        path = collection_path(api_version, kind, namespace)
        found = await self.request_or_none("GET", path, (ABSENT,), query={"labelSelector": selector})
        return list((found or {}).get("items") or [])

    async def events(self, namespace: str, involved: str, reason: str) -> Objs:
        """Events about object `involved` with `reason`; [] when the operator may not list them."""
        selector = f"involvedObject.name={involved},reason={reason}"
        path = f"/api/v1/namespaces/{namespace}/events"
        found = await self.request_or_none("GET", path, NOT_VISIBLE, query={"fieldSelector": selector})
        return list((found or {}).get("items") or [])

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete in the background: the garbage collector removes the child's own pods."""
        path = f"{collection_path(api_version, kind, namespace)}/{name}"
        await self.request_or_none("DELETE", path, (ABSENT,), query={"propagationPolicy": "Background"})

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
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        return await self.request_or_none("GET", path, NOT_VISIBLE) is not None

    async def cluster_object_names(self, api_version: str, plural: str) -> frozenset[str] | None:
        """Names of a cluster-scoped kind (e.g. ClusterTrainingRuntimes); None when not served or not allowed."""
        found = await self.request_or_none("GET", f"/apis/{api_version}/{plural}", NOT_VISIBLE)
        if found is None:
            return None
        return frozenset(str((i.get("metadata") or {}).get("name", "")) for i in found.get("items") or [])

    async def exists(self, path: str) -> bool | None:
        """Whether the object at `path` exists; None when the operator may not look (403)."""
        try:
            await self.request("GET", path)
        except KubeError as err:
            if err.absent:
                return False
            if err.status == FORBIDDEN:
                return None
            raise
        return True

    async def get_config_map(self, namespace: str, name: str) -> Obj | None:
        return await self.request_or_none("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", NOT_VISIBLE)
