"""Deterministic names of the objects that run one attempt of an experiment.

The operator re-renders on every reconcile and must find (not duplicate) what it created, so a
name depends only on the experiment name, the attempt, the runtime and the topology. Names must
fit the tightest place Kubernetes puts them: a Job's name becomes the `job-name` label (63) and
an Indexed Job pod's hostname `<job>-<index>` (a 63-char DNS label); a PyTorchJob's pods and
Services are `<job>-worker-<i>`; a TrainJob's JobSet pods have the hostname
`<trainjob>-node-0-<i>` (with the default replicated job `node`); a headless Service name is a
DNS-1035 label (starts with a letter). So the shared base is kept to `BASE_MAX` characters, cut
with a hash when longer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ftbench.contracts.enums import Runtime
from ftbench.contracts.labels import DNS_LABEL_MAX, digest, fit

# Room for the longest suffix: "-worker-1023" (PyTorchJob pods, numberNodes <= 1024).
BASE_MAX = DNS_LABEL_MAX - len("-worker-1023")


def dns1035(name: str) -> str:
    """Lower-case letters, digits and '-', starting with a letter (experiment names may hold dots)."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return label if label[:1].isalpha() else f"x-{label}"


@dataclass(frozen=True)
class ChildNames:
    """What the operator looks for; `workloads` are the objects whose status tells the outcome."""

    base: str
    plan_config_map: str
    workloads: tuple[str, ...]
    service: str | None
    master_host: str

    @property
    def all(self) -> tuple[str, ...]:
        return (self.plan_config_map, *((self.service,) if self.service else ()), *self.workloads)


def experiment_label(experiment: str) -> str:
    """A DNS-1035 label unique to `experiment` in its namespace.

    A name that is already such a label stays readable. Any other is mapped (`dup.x` -> `dup-x`,
    `1abc` -> `x-1abc`), and several names could map to one label, so the mapped form carries a
    hash of the original name: two experiments never share (or follow) each other's children."""
    label = dns1035(experiment)
    return label if label == experiment else f"{label}-{digest(experiment)}"


def base_name(experiment: str, attempt: int) -> str:
    return fit(f"{experiment_label(experiment)}-a{attempt}", BASE_MAX)


def child_names(
    experiment: str, attempt: int, runtime: Runtime, *, number_nodes: int, trials: int, replicated_job: str = "node"
) -> ChildNames:
    """Names of every object `render_experiment` makes for this attempt.

    Several trials without Indexed Jobs (runtime Job), and on runtime TrainJob, are one workload
    per trial, `<base>-t<i>`. A TrainJob's master is pod 0 of its JobSet's first Job behind the
    JobSet's headless Service (what Trainer's torch plugin puts into PET_MASTER_ADDR).
    """
    base = base_name(experiment, attempt)
    service = base if runtime == Runtime.INDEXED_JOB and number_nodes > 1 else None
    one_per_trial = runtime in (Runtime.JOB, Runtime.TRAIN_JOB) and trials > 1
    workloads = tuple(f"{base}-t{i}" for i in range(trials)) if one_per_trial else (base,)
    if runtime == Runtime.PYTORCH_JOB:
        master_host = f"{base}-master-0"
    elif runtime == Runtime.TRAIN_JOB:
        master_host = f"{workloads[0]}-{replicated_job}-0-0.{workloads[0]}"
    elif service:
        master_host = f"{base}-0.{service}"
    else:
        master_host = "127.0.0.1"
    return ChildNames(
        base=base, plan_config_map=f"{base}-plan", workloads=workloads, service=service, master_host=master_host
    )


def trainer_account_name(experiment: str) -> str:
    """The experiment's own trainer ServiceAccount (and its Role and RoleBinding): one per
    experiment, not per attempt, so a retry reuses it; a DNS label like every other child."""
    return fit(f"{experiment_label(experiment)}-trainer", DNS_LABEL_MAX)


def sweep_child_name(sweep: str, point: int, repeat: int) -> str:
    """The FineTuneExperiment that runs `repeat` of `point` of a sweep: deterministic, so an operator
    restarted mid-sweep finds (and does not duplicate) what it created; a DNS label like the rest."""
    return fit(f"{experiment_label(sweep)}-p{point}-r{repeat}", DNS_LABEL_MAX)
