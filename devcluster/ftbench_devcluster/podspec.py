"""Turn a Pod object into what ``podrun`` runs: environment, volumes on disk, mounts.

This is the part of a kubelet that reads the pod spec (downward API, ConfigMap/Secret
references, volume sources); it works on the plain JSON dicts the API server returns, so that
field names are the ones in the Kubernetes docs and in our rendered manifests.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ftbench.contracts.kube import Obj

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
_LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodConfigError(RuntimeError):
    """The pod cannot start yet (a referenced ConfigMap or Secret is missing); the kubelet retries."""


class ObjectSource(Protocol):
    """Reads the objects a pod refers to; ``None`` when the object does not exist."""

    def config_map(self, namespace: str, name: str) -> Obj | None: ...

    def secret(self, namespace: str, name: str) -> Obj | None: ...

    def service_account_token(self, namespace: str, account: str, audience: str | None, seconds: int) -> str: ...


@dataclass(frozen=True)
class VolumeDir:
    """Where a pod volume lives on the host, or ``tmpfs`` for an in-memory emptyDir."""

    path: Path
    tmpfs: bool = False
    read_only: bool = False


def field_value(pod: Obj, path: str) -> str:
    """The downward API: a ``fieldRef.fieldPath`` of the pod (status fields as the kubelet reports them)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if match := _LABEL_OR_ANNOTATION.match(path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
    }
    if path in ("metadata.labels", "metadata.annotations"):
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(path.split(".")[1]) or {}).items()))
    if path not in simple:
        raise PodConfigError(f"unsupported fieldRef fieldPath {path!r}")
    return str(simple[path] or "")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known variables are replaced, ``$$`` escapes, the rest stays."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(sub, text)


def _decoded(obj: Obj, *, secret: bool) -> dict[str, bytes]:
    """ConfigMap ``data`` + ``binaryData``, or Secret ``data`` (base64) + ``stringData``, as bytes."""
    out: dict[str, bytes] = {}
    if secret:
        out.update({k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()})
        out.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
    else:
        out.update({k: v.encode() for k, v in (obj.get("data") or {}).items()})
        out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def _referenced(source: ObjectSource, namespace: str, kind: str, name: str, optional: bool) -> dict[str, bytes]:
    obj = source.secret(namespace, name) if kind == "secret" else source.config_map(namespace, name)
    if obj is None:
        if optional:
            return {}
        raise PodConfigError(f"{kind} {namespace}/{name} not found")
    return _decoded(obj, secret=kind == "secret")


def container_env(pod: Obj, container: Obj, base: Mapping[str, str], source: ObjectSource) -> dict[str, str]:
    """The container's environment, on top of ``base`` (PATH, HOME, service host: what an image
    and the kubelet would provide)."""
    namespace = pod["metadata"]["namespace"]
    env = dict(base)
    for item in container.get("envFrom") or []:
        prefix = item.get("prefix", "")
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if ref := item.get(key):
                data = _referenced(source, namespace, kind, ref["name"], bool(ref.get("optional")))
                env.update({prefix + k: v.decode(errors="replace") for k, v in data.items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        value_from = var["valueFrom"]
        if ref := value_from.get("fieldRef"):
            env[name] = field_value(pod, ref["fieldPath"])
        elif ref := value_from.get("resourceFieldRef"):
            resources = container.get("resources") or {}
            kind, _, res = ref["resource"].partition(".")
            env[name] = str((resources.get(kind) or {}).get(res, "0"))
        else:
            kind, ref = (
                ("secret", value_from["secretKeyRef"])
                if "secretKeyRef" in value_from
                else ("configmap", value_from["configMapKeyRef"])
            )
            data = _referenced(source, namespace, kind, ref["name"], bool(ref.get("optional")))
            if ref["key"] in data:
                env[name] = data[ref["key"]].decode(errors="replace")
            elif not ref.get("optional"):
                raise PodConfigError(f"{kind} {namespace}/{ref['name']} has no key {ref['key']!r}")
    return env


def _write_files(directory: Path, files: Mapping[str, bytes], items: list[Obj] | None, mode: int | None) -> None:
    """Keys as files (or only the listed ``items`` at their paths), as ConfigMap/Secret volumes do."""
    chosen = {i["key"]: (i["path"], i.get("mode")) for i in items} if items else {k: (k, None) for k in files}
    for key, (rel, item_mode) in chosen.items():
        if key not in files:
            continue
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[key])
        target.chmod(item_mode if item_mode is not None else (mode if mode is not None else 0o644))


def _downward_files(pod: Obj, items: list[Obj]) -> dict[str, bytes]:
    return {i["path"]: field_value(pod, i["fieldRef"]["fieldPath"]).encode() for i in items if "fieldRef" in i}


def _projected(pod: Obj, directory: Path, spec: Obj, source: ObjectSource) -> None:
    """Projected volumes, as newer API servers put the service-account token into every pod."""
    namespace = pod["metadata"]["namespace"]
    for src in spec.get("sources") or []:
        if ref := src.get("configMap") or src.get("secret"):
            kind = "configmap" if "configMap" in src else "secret"
            data = _referenced(source, namespace, kind, ref["name"], bool(ref.get("optional")))
            _write_files(directory, data, ref.get("items"), spec.get("defaultMode"))
        elif down := src.get("downwardAPI"):
            files = _downward_files(pod, down.get("items") or [])
            _write_files(directory, files, None, spec.get("defaultMode"))
        elif tok := src.get("serviceAccountToken"):
            account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
            token = source.service_account_token(
                namespace, account, tok.get("audience"), int(tok.get("expirationSeconds", 3600))
            )
            _write_files(directory, {"t": token.encode()}, [{"key": "t", "path": tok["path"]}], 0o600)


def prepare_volumes(pod: Obj, volumes_dir: Path, pvc_dir: Path, source: ObjectSource) -> dict[str, VolumeDir]:
    """Materialise the pod's volumes on the host.

    PVCs map to ``pvc_dir/<claimName>`` (created empty), so data put there before (a model, a
    dataset) is what the pod sees, and what it writes outlives it, as with a real claim.
    """
    out: dict[str, VolumeDir] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = vol["name"]
        local = volumes_dir / name
        if "emptyDir" in vol:
            memory = (vol["emptyDir"] or {}).get("medium") == "Memory"
            local.mkdir(parents=True, exist_ok=True)
            out[name] = VolumeDir(local, tmpfs=memory)
        elif "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]
            path = pvc_dir / claim["claimName"]
            path.mkdir(parents=True, exist_ok=True)
            out[name] = VolumeDir(path, read_only=bool(claim.get("readOnly")))
        elif "hostPath" in vol:
            path = Path(vol["hostPath"]["path"])
            if vol["hostPath"].get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            out[name] = VolumeDir(path)
        elif "configMap" in vol or "secret" in vol:
            kind, spec = ("configmap", vol["configMap"]) if "configMap" in vol else ("secret", vol["secret"])
            ref_name = spec.get("name") or spec.get("secretName")
            data = _referenced(source, pod["metadata"]["namespace"], kind, ref_name, bool(spec.get("optional")))
            _fresh_dir(local)
            _write_files(local, data, spec.get("items"), spec.get("defaultMode"))
            out[name] = VolumeDir(local, read_only=True)
        elif "downwardAPI" in vol:
            _fresh_dir(local)
            files = _downward_files(pod, vol["downwardAPI"].get("items") or [])
            _write_files(local, files, None, vol["downwardAPI"].get("defaultMode"))
            out[name] = VolumeDir(local, read_only=True)
        elif "projected" in vol:
            _fresh_dir(local)
            _projected(pod, local, vol["projected"], source)
            out[name] = VolumeDir(local, read_only=True)
        else:
            kinds = sorted(k for k in vol if k != "name")
            raise PodConfigError(
                f"volume {name}: unsupported source {kinds} (the local kubelet knows emptyDir, "
                "persistentVolumeClaim, hostPath, configMap, secret, downwardAPI, projected)"
            )
    return out


def _fresh_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def container_mounts(container: Obj, volumes: Mapping[str, VolumeDir]) -> list[Obj]:
    """``podrun`` mounts for the container's ``volumeMounts`` (``subPath`` included)."""
    mounts: list[Obj] = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm["name"])
        if vol is None:
            raise PodConfigError(f"container {container['name']}: volumeMount {vm['name']!r} has no volume")
        read_only = bool(vm.get("readOnly")) or vol.read_only
        sub = vm.get("subPath", "")
        if vol.tmpfs and not sub:
            mounts.append({"target": vm["mountPath"], "kind": "tmpfs", "readOnly": read_only})
            continue
        source = vol.path / sub if sub else vol.path
        if sub and not source.exists():
            source.mkdir(parents=True)
        mounts.append(
            {"target": vm["mountPath"], "source": str(source), "readOnly": read_only, "isFile": source.is_file()}
        )
    return mounts


def termination_message_path(container: Obj) -> str:
    return container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH


def resolve_command(container: Obj, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded; the image's entrypoint does not exist here."""
    argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
    if not argv:
        raise PodConfigError(
            f"container {container['name']}: no command (the image's entrypoint is not available locally)"
        )
    return argv


def default_path(bin_dir: str | os.PathLike[str] | None) -> str:
    """PATH for containers: the configured bin dir (where ``ftbench-trainer`` is) before the host's."""
    host = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return f"{bin_dir}{os.pathsep}{host}" if bin_dir else host


__all__ = [
    "DEFAULT_TERMINATION_MESSAGE_PATH",
    "ObjectSource",
    "PodConfigError",
    "VolumeDir",
    "container_env",
    "container_mounts",
    "default_path",
    "expand",
    "field_value",
    "prepare_volumes",
    "resolve_command",
    "termination_message_path",
]
