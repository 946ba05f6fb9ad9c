"""Reading a report's runs from a cluster: FineTuneSweeps and the FineTuneExperiments they own.

A sweep's table is its `status.points`, written by the operator with the same `plan_sweep` the
local store uses; each child experiment (label `ftbench.io/sweep`, with its point and repeat
labels) gives one repeat's metrics from `status.results`. Experiments without the label are
reported as runs of their own. The point specs come from expanding the sweep's spec here with the
packaged catalog, the same pure expansion the operator ran.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftbench.api.network import status_network
from ftbench.api.prediction_report import (
    PREDICTED_OOM_REASON,
    status_predicted_fits,
    status_predicted_percent,
    status_refused_for_predicted_oom,
)
from ftbench.api.resource import API_VERSION, PLURAL, SWEEP_PLURAL
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import DeviceHours, FineTuneSweepSpec, PointRow
from ftbench.catalog import Catalog
from ftbench.contracts.labels import SWEEP_LABEL, SWEEP_POINT_LABEL, SWEEP_REPEAT_LABEL, label_value
from ftbench.contracts.outcomes import Phase
from ftbench.contracts.results import Metrics
from ftbench.extras import require
from ftbench.kubeapi.client import call
from ftbench.local.store import RunRecord
from ftbench.report.data import ReportData, RunMeasurement, sweep_data
from ftbench.sweep.points import expand
from ftbench.sweep.schedule import OOM_REASON, RunState

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

ObjView = Mapping[str, Any]  # an object as read from the cluster: the report never changes one
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
TIMEOUT = (5.0, 60.0)  # connect, read: a namespace may hold thousands of experiments


def _metrics(status: ObjView) -> Metrics | None:
    results = status.get("results")
    return Metrics.model_validate(results) if results else None


def _gpu_oom(status: ObjView) -> bool:
    return status.get("phase") == Phase.INVALID and str(status.get("invalidReason") or "").startswith(OOM_REASON)


def run_state(obj: ObjView, point: int, repeat: int) -> RunState:
    """A child FineTuneExperiment as the planner reads it: phase, the OOM reason, `status.results`."""
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "")
    return RunState(
        name=str(obj["metadata"]["name"]),
        point=point,
        repeat=repeat,
        phase=Phase(phase) if phase in Phase.__members__.values() else None,
        reason=OOM_REASON
        if _gpu_oom(status)
        else PREDICTED_OOM_REASON
        if status_refused_for_predicted_oom(status)
        else "",
        message=str(status.get("invalidReason") or status.get("message") or ""),
        metrics=_metrics(status),
        network=status_network(status),
        predicted_memory_percent=status_predicted_percent(status),
        predicted_fits=status_predicted_fits(status),
    )


def _slot(obj: ObjView) -> tuple[str, int, int] | None:
    """(sweep label, point, repeat) of a sweep's child; None for an experiment of its own."""
    labels = obj.get("metadata", {}).get("labels") or {}
    try:
        return labels[SWEEP_LABEL], int(labels[SWEEP_POINT_LABEL]), int(labels[SWEEP_REPEAT_LABEL])
    except (KeyError, ValueError):
        return None


def from_objects(
    sweeps: Sequence[ObjView], experiments: Sequence[ObjView], catalog: Catalog, source: str
) -> ReportData:
    """The report data of one namespace's FineTuneSweeps and FineTuneExperiments (as listed)."""
    children: dict[str, list[RunState]] = {}
    plain: list[RunMeasurement] = []
    for obj in experiments:
        slot = _slot(obj)
        if slot is not None:
            children.setdefault(slot[0], []).append(run_state(obj, slot[1], slot[2]))
            continue
        status = obj.get("status") or {}
        phase = "GpuOom" if _gpu_oom(status) else str(status.get("phase") or "Pending")
        spec = status.get("acceptedSpec") or obj.get("spec") or {}
        plain.append(
            RunMeasurement(str(obj["metadata"]["name"]), spec, phase, _metrics(status), network=status_network(status))
        )
    found = []
    for obj in sorted(sweeps, key=lambda o: str(o["metadata"]["name"])):
        name = str(obj["metadata"]["name"])
        spec = FineTuneSweepSpec.model_validate(obj.get("spec") or {})
        status = obj.get("status") or {}
        rows = [PointRow.model_validate(p) for p in status.get("points", [])]
        hours = DeviceHours.model_validate(status["deviceHours"]) if status.get("deviceHours") else None
        found.append(sweep_data(name, spec, expand(spec, catalog), rows, children.get(label_value(name), []), hours))
    return ReportData(source=source, sweeps=tuple(found), runs=tuple(plain))


class NoCluster(RuntimeError):
    """No way to reach a cluster: no kubernetes client, no kubeconfig and not in a pod."""


def connect() -> tuple[ApiClient, str]:
    """The client and its namespace, found as kubectl finds them: KUBECONFIG (read now, not when the
    client was imported) or ~/.kube/config and its context's namespace ("default" when it names
    none); without either, in a pod, the service account and its namespace."""
    require("operator", "--from-cluster", ("kubernetes",))
    from kubernetes import client, config

    configuration = client.Configuration()
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    try:
        if any(Path(p).is_file() for p in kubeconfig.split(os.pathsep)):
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            _, context = config.list_kube_config_contexts(config_file=kubeconfig)
            namespace = (context or {}).get("context", {}).get("namespace") or "default"
        else:
            config.load_incluster_config(client_configuration=configuration)
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip()
    except (config.ConfigException, OSError) as err:
        raise NoCluster(f"no kubeconfig ({kubeconfig}) and not in a pod: {err}") from err
    return client.ApiClient(configuration), namespace


def list_items(api: ApiClient, namespace: str, plural: str) -> list[ObjView]:
    answer = call(api, "GET", f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}", timeout=TIMEOUT)
    return list((answer or {}).get("items", []))


def _reach(namespace: str | None, api: ApiClient | None) -> tuple[ApiClient, str]:
    """The client (connected now unless given) and the namespace: the one named, else the context's."""
    if api is None:
        api, default = connect()
        return api, namespace or default
    return api, namespace or "default"


def from_cluster(catalog: Catalog, namespace: str | None = None, api: ApiClient | None = None) -> ReportData:
    """Every FineTuneSweep and FineTuneExperiment of `namespace` (default: the context's)."""
    api, namespace = _reach(namespace, api)
    sweeps = list_items(api, namespace, SWEEP_PLURAL)
    experiments = list_items(api, namespace, PLURAL)
    return from_objects(sweeps, experiments, catalog, f"namespace {namespace} of {api.configuration.host}")


def experiment_record(obj: ObjView) -> RunRecord:
    """A FineTuneExperiment as a results row, the shape `ftbench results --export` writes for local
    runs: its uid as the run id, its phase as the status, the accepted spec (the submitted one,
    with defaults, before the operator accepted it) and what `status.results` measured."""
    meta, status = obj["metadata"], obj.get("status") or {}
    raw = status.get("acceptedSpec") or obj.get("spec") or {}
    try:
        spec = FineTuneExperimentSpec.model_validate(raw).to_wire()
    except ValueError:  # an invalid experiment: its fields as written
        spec = dict(raw)
    result = {"isValid": status.get("isValid"), "metrics": status.get("results"),
              "environment": status.get("environment")}  # fmt: skip
    metrics = status.get("results") or {}
    return RunRecord(
        id=str(meta.get("uid") or meta["name"]),
        name=str(meta["name"]),
        started_at=str(status.get("startTime") or meta.get("creationTimestamp") or ""),
        finished_at=status.get("completionTime"),
        experiment=str(spec.get("experiment", "")),
        engine=str(spec.get("engine", "")),
        model=str(spec.get("model", "")),
        number_gpus=int(spec.get("numberGpus", 0)),
        batch_size=int(spec.get("batchSize", 0)),
        model_max_length=int(spec.get("modelMaxLength", 0)),
        status=str(status.get("phase") or "Pending"),
        is_valid=status.get("isValid"),
        train_tokens_per_second=metrics.get("trainTokensPerSecond"),
        run_dir="",
        spec=spec,
        results=[{k: v for k, v in result.items() if v is not None}],
    )


def experiment_records(namespace: str | None = None, api: ApiClient | None = None) -> list[RunRecord]:
    """Every FineTuneExperiment of `namespace` (default: the context's) as results rows."""
    api, namespace = _reach(namespace, api)
    return [experiment_record(obj) for obj in list_items(api, namespace, PLURAL)]
