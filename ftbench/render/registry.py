"""Each runtime defined once: its workload kind, whether it can carry a spec, how to build it, how
to read its end, and what the operator watches.

Before, what ftbench knew of a runtime was spread over the plan, the manifests, the operator's
follow, classification, start and watches. Now `RUNTIMES` holds it (as Kubeflow Trainer's runtime
framework registers its plugins) and everything else reads it:

- `ftbench.render.manifests` asks `refusal` (`ftbench.api.runtime_choice`, which validation asks
  too) whether the chosen runtime can carry the spec, and `builder` for the objects;
- the operator follows a `status.job` only of a kind in `WORKLOAD_KINDS`, watches each of them
  (`app`), reads a finished workload's end through `success_conditions` (`summaries`), and says
  `missing` when the cluster does not serve the kind (`handlers.handle_start`).

Adding a runtime is one `RuntimeDef` here plus its builders (and its enum value in the API).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ftbench.api.runtime_choice import REFUSALS, Carry, Refusal
from ftbench.contracts.enums import Runtime
from ftbench.contracts.plan import RendezvousSource
from ftbench.render.names import ChildNames
from ftbench.render.pods import PodInputs
from ftbench.render.runtimes import (
    Obj,
    WorkloadMeta,
    multi_node_indexed_job,
    pytorch_job,
    single_job,
    stability_indexed_job,
    stability_jobs,
)
from ftbench.render.trainjob import TRAINER_API_VERSION, stability_train_jobs, train_job

Builder = Callable[[PodInputs, WorkloadMeta, ChildNames], list[Obj]]


@dataclass(frozen=True)
class WorkloadKind:
    """A kind of object whose pods run the training and whose status says how it ended."""

    api_version: str
    kind: str
    plural: str
    # Condition types that, when True, mean the workload finished well (Failed is the other end).
    success_conditions: tuple[str, ...]
    # The CRD the cluster must serve ("" for a built-in kind), and what to do when it does not.
    crd: str = ""
    missing: str = ""
    # One object per stability trial or repeat where the cluster runs them one Job at a time.
    one_per_trial: bool = False
    # Its pods are made by the Jobs of a JobSet named as the workload (Trainer v2), not by it.
    pods_via_jobset: bool = False

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


JOB = WorkloadKind("batch/v1", "Job", "jobs", ("Complete",), one_per_trial=True)
PYTORCH_JOB = WorkloadKind(
    "kubeflow.org/v1",
    "PyTorchJob",
    "pytorchjobs",
    ("Succeeded",),
    crd="pytorchjobs.kubeflow.org",
    missing="runtime PyTorchJob needs the Kubeflow training operator, but this cluster does not serve "
    "pytorchjobs.kubeflow.org; set spec.run.runtime to auto or IndexedJob, or install the training operator",
)
TRAIN_JOB = WorkloadKind(
    TRAINER_API_VERSION,
    "TrainJob",
    "trainjobs",
    ("Complete",),
    crd="trainjobs.trainer.kubeflow.org",
    missing="runtime TrainJob needs Kubeflow Trainer v2, but this cluster does not serve "
    "trainjobs.trainer.kubeflow.org; set spec.run.runtime to auto, IndexedJob or PyTorchJob, or install Trainer v2",
    one_per_trial=True,
    pods_via_jobset=True,
)


def _no_warning(c: Carry) -> str | None:
    return None


@dataclass(frozen=True)
class RuntimeDef:
    runtime: Runtime
    workload: WorkloadKind
    refusal: Refusal  # why this runtime cannot carry the spec (the whole message), else None
    build: Callable[[Carry], Builder]  # the builder of this spec's objects
    # Where ranks of several nodes learn the master's address (the plan's rendezvous source).
    rendezvous: RendezvousSource = "local"
    # What will work but may not for long, or not as the user expects (`ftbench render` prints it).
    warning: Refusal = _no_warning


def _pytorch_job_warning(c: Carry) -> str | None:
    """Kueue's default configuration no longer enables its `kubeflow.org/pytorchjob` integration
    (kubernetes-sigs/kueue#12606, June 2026; to be deprecated with Trainer v1), so on a current Kueue
    a queued PyTorchJob is not managed by the queue unless the cluster enabled it."""
    if not c.spec.run.queue_name:
        return None
    return (
        f"spec.run.queueName {c.spec.run.queue_name!r} with runtime PyTorchJob: current Kueue (API v1beta2) no "
        "longer enables its kubeflow.org/pytorchjob integration by default and plans to remove it, so the "
        "PyTorchJob is only queued where the cluster's Kueue enables that integration; use runtime TrainJob "
        "(Kubeflow Trainer v2, queued through the kueue.x-k8s.io/queue-name label) or IndexedJob"
    )


def _indexed_job_builder(c: Carry) -> Builder:
    if c.trials > 1:
        return stability_indexed_job
    return multi_node_indexed_job if c.spec.number_nodes > 1 else single_job


RUNTIMES: dict[Runtime, RuntimeDef] = {
    Runtime.JOB: RuntimeDef(
        Runtime.JOB, JOB, REFUSALS[Runtime.JOB], lambda c: stability_jobs if c.trials > 1 else single_job
    ),
    Runtime.INDEXED_JOB: RuntimeDef(
        Runtime.INDEXED_JOB, JOB, REFUSALS[Runtime.INDEXED_JOB], _indexed_job_builder, rendezvous="indexedjob"
    ),
    Runtime.PYTORCH_JOB: RuntimeDef(
        Runtime.PYTORCH_JOB,
        PYTORCH_JOB,
        REFUSALS[Runtime.PYTORCH_JOB],
        lambda c: pytorch_job,
        rendezvous="pytorchjob",
        warning=_pytorch_job_warning,
    ),
    Runtime.TRAIN_JOB: RuntimeDef(
        Runtime.TRAIN_JOB,
        TRAIN_JOB,
        REFUSALS[Runtime.TRAIN_JOB],
        lambda c: stability_train_jobs if c.trials > 1 else train_job,
        rendezvous="trainjob",
    ),
}
#: Every workload kind a runtime creates: what the operator follows and watches.
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = tuple({d.workload.kind: d.workload for d in RUNTIMES.values()}.values())


def workload_kind(api_version: str, kind: str) -> WorkloadKind | None:
    """The workload kind of that apiVersion and kind, None when no runtime creates it."""
    return next((w for w in WORKLOAD_KINDS if (w.api_version, w.kind) == (api_version, kind)), None)
