"""Rules for a runtime the spec names itself (`spec.run.runtime`), which need no cluster facts.

The runtime's own refusal (`runtime_choice.REFUSALS`, which the render step also asks) decides,
on a cluster that has every runtime, so the fix names them all; the CEL twin refuses the same at
`kubectl apply`. What depends on the cluster (auto's choice, a missing feature, the images) is
`runtime_choice.profile_refusals`, checked by validation with the profile.
"""

from __future__ import annotations

from collections.abc import Iterator

from ftbench.api import effective
from ftbench.api.profile import ClusterProfile, Features
from ftbench.api.rules.rule import Rule, RuleFamily, cel_list
from ftbench.api.runtime_choice import (
    Carry,
    indexed_job_repeats_refusal,
    job_refusal,
    pytorch_job_refusal,
    train_job_refusal,
)
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.enums import Runtime

# A cluster with every runtime: a refusal's fix then lists each one a user may pick.
ANY_CLUSTER = ClusterProfile(features=Features(indexed_jobs=True, training_operator=True, trainer_v2=True))
_RUNTIME = "(!has(self.run) || !has(self.run.runtime) || self.run.runtime != '{}')"


def _named(s: FineTuneExperimentSpec, c: Catalog, runtime: Runtime) -> Carry | None:
    """The carry of a spec that names `runtime` itself (None for any other spec)."""
    if s.run.runtime != runtime:
        return None
    why = f"spec.run.runtime is {runtime.value}"
    return Carry(s, ANY_CLUSTER, effective.trials(s, c), why, why)


def runtime_rules(catalog: Catalog) -> Iterator[Rule]:
    family = RuleFamily()
    sequential = [name for name, e in catalog.experiments.items() if e.trials > 1]

    @family.rule(
        "runtime.job-one-node",
        "run.runtime",
        "runtime Job runs one pod: one node",
        cel=f"{_RUNTIME.format('Job')} || !has(self.numberNodes) || self.numberNodes == 1",
    )
    def job_one_node(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        carry = _named(s, c, Runtime.JOB)
        return None if carry is None else job_refusal(carry)

    @family.rule(
        "runtime.pytorchjob-one-trial",
        "run.runtime",
        "runtime PyTorchJob runs one trial: no stability trials or repeats",
        cel=f"{_RUNTIME.format('PyTorchJob')} || (!(self.experiment in {cel_list(sequential)}) "
        "&& (!has(self.repeats) || self.repeats <= 1))",
    )
    def pytorch_job_one_trial(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        carry = _named(s, c, Runtime.PYTORCH_JOB)
        return None if carry is None else pytorch_job_refusal(carry)

    @family.rule(
        "runtime.indexedjob-precise-repeats",
        "run.runtime",
        "repeats that may stop at targetPrecisionPercent need one Job each, not an Indexed Job",
        cel=f"{_RUNTIME.format('IndexedJob')} || !has(self.targetPrecisionPercent) || !has(self.repeats) "
        "|| self.repeats <= 1",
    )
    def indexed_job_precise_repeats(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        carry = _named(s, c, Runtime.INDEXED_JOB)
        return None if carry is None else indexed_job_repeats_refusal(carry)

    @family.rule(
        "runtime.trainjob-priority",
        "run.priorityClassName",
        "a TrainJob takes no priorityClassName",
        cel=f"{_RUNTIME.format('TrainJob')} || !has(self.run.priorityClassName)",
    )
    def train_job_priority(s: FineTuneExperimentSpec, c: Catalog) -> str | None:
        carry = _named(s, c, Runtime.TRAIN_JOB)
        return None if carry is None else train_job_refusal(carry)

    return iter(family.rules)
